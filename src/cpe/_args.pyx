"""The checks on top: every argument turned into a checked value, once, with its
name in the errors.

One converter per kind of argument (a count, an integer, a real number, a
choice, a dtype, positions, a sequence), each taking the argument's name, and
the adoption of ``out=`` (a NumPy array, or another library's CPU array through
DLPack or the buffer protocol), checked from its C-level fields. The engine's
Python face (``_core``) and the modules built on it call these; nothing here
allocates an output or computes a value.
"""
import numbers
import operator
import sys
from collections.abc import Mapping

import numpy as np

cimport numpy as cnp
from cpython.buffer cimport PyObject_CheckBuffer
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.sequence cimport PySequence_Check
from libc.math cimport isfinite

from cpe._engine cimport largest_magnitude

cnp.import_array()

cdef long long _EXACT_LIMIT = 1LL << 53
cdef object _FLOAT64 = np.dtype(np.float64)
cdef object _FLOAT32 = np.dtype(np.float32)
cdef object _FLOAT16 = np.dtype(np.float16)
cdef object _NP_FLOAT64_TYPE = np.float64
cdef object _NP_FLOAT32_TYPE = np.float32
cdef object _NP_FLOAT16_TYPE = np.float16
cdef object _NP_INT64_TYPE = np.int64
# ml_dtypes' bfloat16 NumPy dtype (the one JAX uses), once a call has asked for it:
# cpe's fourth dtype, for those who install that package.
cdef object _BFLOAT16 = None


def _max_ndim():
    for ndim in (64, 32):  # NumPy 2, NumPy 1
        try:
            np.empty((1,) * ndim)
            return ndim
        except ValueError:
            pass
    return 32


_MAX_NDIM = _max_ndim()
# ---- argument checks: each names the argument and what was expected ----

cpdef Py_ssize_t as_count(value, str name, Py_ssize_t minimum) except -1:
    """``value`` as an int ``>= minimum``, or a TypeError/ValueError naming it."""
    cdef int overflow = 0
    cdef long long small
    if type(value) is int:  # the common case, in C
        small = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and minimum <= small <= PY_SSIZE_T_MAX:
            return <Py_ssize_t>small
    return _count_checked(value, name, minimum)


cpdef object as_integer(value, str name):
    """``value`` as a Python int (any size), or the TypeError naming it."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


cdef Py_ssize_t _count_checked(value, str name, Py_ssize_t minimum) except -1:
    """as_count beyond its first branch: any integer, and the errors."""
    count = as_integer(value, name)
    if count < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {count}")
    if count > sys.maxsize:
        raise ValueError(f"{name} is too large: {count}")
    return count


cpdef list as_sequence(value, str name, str what, Py_ssize_t length=-1):
    """The items of ``value``, a flat sequence (not a str, bytes or mapping, not
    ragged) of ``length`` items if given, or the TypeError naming it and ``what``
    it must hold."""
    try:
        flat = not isinstance(value, (str, bytes, Mapping)) and np.ndim(value) == 1
    except ValueError:  # ragged
        flat = False
    if not flat or (length >= 0 and len(value) != length):
        raise TypeError(f"{name} must be a sequence of {what}")
    return list(value)


cpdef double as_real(value, str name) except? -1.0:
    """``value`` as a finite float, or a TypeError/ValueError naming it."""
    cdef double x
    cdef int overflow = 0
    cdef long long whole
    if type(value) is float:  # the common cases, in C
        x = PyFloat_AS_DOUBLE(value)
        if isfinite(x):
            return x
    elif type(value) is int:
        whole = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and -_EXACT_LIMIT <= whole <= _EXACT_LIMIT:  # (so exact)
            return <double>whole
    return _real_checked(value, name)


cdef double _real_checked(value, str name) except? -1.0:
    """as_real beyond its first branch: any real number, and the errors."""
    cdef double x
    if isinstance(value, float):  # float and its subclasses (np.float64): no checks
        x = value
    elif type(value) is int:  # exactly int, so not a bool
        try:
            x = value
        except OverflowError:
            raise ValueError(f"{name} must be finite, got {value!r}") from None
    else:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a real number, got bool")
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
            value = value[()]
        if not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
        try:
            x = float(value)
        except OverflowError:
            raise ValueError(f"{name} must be finite, got {value!r}") from None
    if not isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return x


cpdef double as_positive(value, str name) except? -1.0:
    """``value`` as a finite float ``> 0``, or a TypeError/ValueError naming it."""
    cdef double x = as_real(value, name)
    if not x > 0.0:
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return x


cpdef object as_choice(value, str name, options):
    """``value`` if it is one of the strings ``options`` (a sequence, or a mapping's
    keys), or the ValueError naming it and them (arrays and other objects are not)."""
    if isinstance(value, str) and value in options:
        return value
    raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")


def _dtype_names():
    """The usual ways of naming the three dtypes, read by NumPy once: a type or a
    string is then one dict lookup instead of a call to np.dtype."""
    canonical = {_FLOAT64: _FLOAT64, _FLOAT32: _FLOAT32, _FLOAT16: _FLOAT16}
    names = (np.float64, np.float32, np.float16, float, "float64", "float32", "float16",
             "float", "double", "single", "half", "f8", "f4", "f2", "d", "f", "e")
    return {name: canonical[np.dtype(name)] for name in names}


cdef dict _DTYPE_NAMES = _dtype_names()
# Byte-order marks that keep a dtype string native ("=f8", "<f8" on little-endian).
cdef tuple _NATIVE_ORDER = ("=", "|", "<" if sys.byteorder == "little" else ">")


cdef object _bfloat16(str what):
    """ml_dtypes' bfloat16 dtype, or an ImportError saying that ``what`` needs it."""
    global _BFLOAT16
    if _BFLOAT16 is None:
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError(f"{what} needs the ml_dtypes package, which gives NumPy its "
                              "bfloat16 dtype: pip install ml_dtypes") from None
        _BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # one object: NumPy keeps it per type
    return _BFLOAT16


cdef str _DTYPES = "float64, float32, float16 or bfloat16"


cpdef object as_dtype(dtype, out=None, str out_name="out"):
    """``dtype`` as one of the four dtype objects (compared by identity later),
    or a TypeError naming it. PyTorch's dtypes are read by their names: cpe never
    imports torch. None (not given): float64, or the dtype of the output ``out``
    (named ``out_name``) when it is given, as NumPy's ufuncs take the output's."""
    if dtype is None:  # the default
        return _FLOAT64 if out is None else _dtype_of_out(out, out_name)
    if dtype is _NP_FLOAT64_TYPE:
        return _FLOAT64
    if dtype is _FLOAT64 or dtype is _FLOAT32 or dtype is _FLOAT16:
        return dtype
    if dtype is _BFLOAT16 and dtype is not None:
        return dtype
    if type(dtype) is str:
        # Strings are read from the table alone: np.dtype warns about some
        # (deprecated aliases such as "a") before it says what they are.
        known = _DTYPE_NAMES.get(dtype)
        if known is None and len(dtype) <= 3 and dtype[:1] in _NATIVE_ORDER:  # "<f8", "=d"
            known = _DTYPE_NAMES.get(dtype[1:])
        if known is not None:
            return known
        if dtype == "bfloat16":
            return _bfloat16("dtype='bfloat16'")
        raise TypeError(f"dtype must be {_DTYPES}, got {dtype!r}")
    if type(dtype) is type:  # hashable, compared by value
        known = _DTYPE_NAMES.get(dtype)
        if known is not None:
            return known
    if type(dtype).__module__ == "torch":  # torch.float32 and the like, by name
        name = str(dtype).removeprefix("torch.")
        known = _DTYPE_NAMES.get(name)
        if known is not None:
            return known
        if name == "bfloat16":
            return _bfloat16("dtype=torch.bfloat16")
    # dtype=None means float64, as in NumPy; np.dtype(None) compares equal to it.
    # np.dtype raises TypeError, ValueError or even SyntaxError for what it cannot read.
    try:
        dt = np.dtype(dtype)
    except Exception:
        dt = None
    for canonical in (_FLOAT64, _FLOAT32, _FLOAT16):
        if dt is not None and dt == canonical:
            return canonical  # so that later checks are identity tests
    # A bfloat16 NumPy knows of was registered by an imported ml_dtypes.
    if dt is not None and dt.kind == "V" and dt.name == "bfloat16":
        if dt == _bfloat16("dtype bfloat16"):
            return _BFLOAT16
    raise TypeError(f"dtype must be {_DTYPES}, got {dtype!r}")


cdef object _dtype_of_out(out, str name):
    """The dtype of an output ``out`` given without ``dtype=``: one of the four,
    or an error naming ``name``. What is not an array of a dtype (a tuple, a
    memoryview NumPy cannot read) is float64's: its adoption says why it is
    refused."""
    if type(out) is tuple:
        return _FLOAT64
    dt = getattr(out, "dtype", None)
    if dt is None:
        try:
            dt = np.asarray(memoryview(out)).dtype
        except Exception:
            return _FLOAT64
    try:
        return as_dtype(dt)
    except TypeError:
        raise TypeError(f"{name} must have dtype {_DTYPES} (dtype= not given: the output's "
                        f"dtype is {name}'s), got {dt}") from None
    except ImportError:
        raise ImportError(f"{name} is a bfloat16 array, which needs the ml_dtypes package "
                          "(NumPy's bfloat16 dtype): pip install ml_dtypes") from None


cdef bint exact_integer(value, double* x) except -1:
    """Whether the Python or NumPy integer ``value`` has magnitude <= 2**53, an
    exact double, then written to ``x``."""
    cdef int overflow = 0
    cdef long long whole = PyLong_AsLongLongAndOverflow(
        value if type(value) is int else int(value), &overflow)
    x[0] = <double>whole
    return not overflow and -_EXACT_LIMIT <= whole <= _EXACT_LIMIT


cdef int _check_sequence(sequence, int depth, bint to_float, str name) except -1:
    """Bools in a list or tuple of positions, which numpy.asarray would turn into
    0/1 without a word, and masked arrays (their masks would be dropped); with
    ``to_float`` (asarray made floats), integers beyond 2**53, which it rounded.
    Other objects that NumPy reads as arrays (buffers, ``__array__``) are refused,
    other sequences are checked as lists are. The usual
    element types are recognized by identity, cheaply beside the conversion."""
    cdef double x
    if depth > _MAX_NDIM:  # deeper than any array NumPy makes: asarray says why
        return 0
    for item in sequence:
        kind = type(item)
        if kind is float or kind is _NP_FLOAT64_TYPE or kind is _NP_FLOAT32_TYPE:
            continue
        if kind is int or kind is _NP_INT64_TYPE or (
                kind is not bool and isinstance(item, (int, np.integer))):
            if to_float and not exact_integer(item, &x):
                raise ValueError(f"{name} must be integers of magnitude <= 2**53, got {item}")
        elif isinstance(item, (list, tuple)):
            _check_sequence(item, depth + 1, to_float, name)
        elif isinstance(item, (float, np.floating)):
            continue
        elif isinstance(item, (bool, np.bool_)):
            raise TypeError(f"{name} must be real numbers, got a bool in the sequence")
        elif isinstance(item, np.ndarray):
            _reject_masked(item, name)
            if item.dtype.kind == "b":
                raise TypeError(f"{name} must be real numbers, got a bool in the sequence")
            if to_float and item.dtype.kind in "iu" and item.size and (
                    abs(int(item)) > _EXACT_LIMIT if item.ndim == 0 else
                    item.max() > _EXACT_LIMIT or item.min() < -_EXACT_LIMIT):
                raise ValueError(f"{name} must be integers of magnitude <= 2**53")
        elif _array_like(item):
            # Converted by NumPy unchecked (their bools, their integers beyond
            # 2**53, their masks): refused.
            raise TypeError(
                f"{name} must be real numbers: a list or tuple of positions may hold "
                f"numbers, sequences and NumPy arrays, got {kind.__name__} (convert it "
                "with numpy.asarray first)")
        elif _sequence(item):
            _check_sequence(item, depth + 1, to_float, name)  # range, deque, ...
        # Anything else (None, str, complex) makes an array that the dtype check refuses.
    return 0


cdef list _read_once(sequence, int depth, str name):
    """A list of the items of ``sequence``, its nested sequences (lists, tuples
    and other sequences NumPy reads as such, see _sequence) as lists too: each
    read once, so that NumPy converts and _check_sequence checks the same items,
    whatever a sequence yields the next time it is read. Other sequences are
    read by index, as many items as their len() says."""
    cdef Py_ssize_t i, length
    if isinstance(sequence, (list, tuple)):
        items = list(sequence)
    else:
        try:
            length = len(sequence)
            items = [sequence[i] for i in range(length)]
        except MemoryError:
            raise
        except Exception as exc:
            raise TypeError(f"{name}: a sequence of positions ({type(sequence).__name__}) "
                            f"could not be read ({exc!r})") from None
    if depth > _MAX_NDIM:  # deeper than any array NumPy makes: asarray says why
        return items
    for k, item in enumerate(items):
        if isinstance(item, (list, tuple)) or _sequence(item):
            items[k] = _read_once(item, depth + 1, name)
    return items


cdef bint _sequence(item) except -1:
    """Whether NumPy reads ``item`` as a sequence of items: a sequence (of Python's
    protocol: a __getitem__ and a __len__, whether or not registered as a
    collections.abc.Sequence) that is neither a str nor bytes nor an array of its
    own (see _array_like)."""
    if isinstance(item, (str, bytes, np.generic, Mapping)) or not PySequence_Check(item):
        return False
    return hasattr(item, "__len__") and not _array_like(item)


cdef bint _array_like(item):
    """Whether NumPy would read ``item`` as an array of its own: a buffer, or an
    object with ``__array__`` or an array interface."""
    if isinstance(item, np.generic):  # a NumPy scalar: its dtype is checked as any
        return False
    return (PyObject_CheckBuffer(item) or hasattr(item, "__array__")
            or hasattr(item, "__array_interface__") or hasattr(item, "__array_struct__"))


cdef object _reject_masked(position, str name):
    # The mask of masked positions would be ignored (np.asarray drops it). (A
    # masked out= is filled whole, and keeps its mask.)
    masked = sys.modules.get("numpy.ma")
    if masked is not None and isinstance(position, masked.MaskedArray):
        raise TypeError(f"{name} must not be a masked array: its mask would be ignored "
                        f"(use {name}.filled(...) or {name}.compressed())")


cdef bint scalar_position(position, double* p) except -1:
    """A Python or NumPy int (an int subclass too, not a bool) or float scalar as
    the double ``p`` (True, its value unchanged: float32 and float16 are exact
    doubles), integers beyond 2**53 refused; False for anything else,
    which as_positions reads or refuses. NaN and infinity are the kernel's
    error, as in an array."""
    kind = type(position)
    if kind is float or kind is _NP_FLOAT64_TYPE:  # np.float64 is a float
        p[0] = position
        return True
    if kind is int or kind is _NP_INT64_TYPE or (kind is not bool and (
            isinstance(position, int) or isinstance(position, np.integer)
            and not isinstance(position, np.timedelta64))):
        if not exact_integer(position, p):
            raise ValueError(
                f"position must be an integer of magnitude <= 2**53, got {position}")
        return True
    if kind is _NP_FLOAT32_TYPE or kind is _NP_FLOAT16_TYPE:
        p[0] = float(position)
        return True
    return False


cpdef object as_positions(position, str name):
    """Positions as an array of real numbers, neither scanned nor copied yet. A
    tensor that requires grad is read as its values (positions are not
    differentiated; detach() copies nothing)."""
    if getattr(position, "requires_grad", False) is True and hasattr(position, "detach"):
        position = position.detach()
    _reject_masked(position, name)
    cdef bint sequence = isinstance(position, (list, tuple)) or (
        not isinstance(position, np.ndarray) and _sequence(position))
    if sequence:
        position = _read_once(position, 1, name)
    try:
        arr = np.asarray(position)
    except Exception as exc:  # ragged nested sequences and the like
        try:
            if str(getattr(position, "dtype", None)) != "torch.bfloat16":
                raise
            arr = np.asarray(position.float())  # bfloat16 values are float32 values
        except Exception as exc:
            raise TypeError(f"{name} must be a real number or an array of them: {exc}") from None
    kind = arr.dtype.kind
    if kind == "V" and arr.dtype.name == "bfloat16":  # ml_dtypes' (JAX's): the same
        arr, kind = arr.astype(np.float32), "f"
    if sequence:
        _check_sequence(position, 1, kind == "f", name)
    if kind == "b":
        raise TypeError(f"{name} must be a real number or an array of them, got bool")
    if kind not in "iuf":
        raise TypeError(
            f"{name} must be a real number or an array of them, got dtype {arr.dtype}")
    if arr.ndim >= _MAX_NDIM:
        raise ValueError(f"{name} has {arr.ndim} dimensions: the output needs one more, "
                         f"and NumPy allows {_MAX_NDIM}")
    return arr


cdef object positions_float64(arr, str name):
    """The positions as a C-contiguous float64 array of cpe's own; integers must
    be exact.

    Always a copy: the kernels read a position more than once (to check it, then
    to compute its row), so positions that the caller's memory holds could be
    changed in between by another thread, or overwritten by the kernel itself
    when they live inside ``out=``. Called once the output has been checked, so
    that a request that is rejected anyway never scans or copies its positions.
    """
    # Floats are checked for NaN/inf by the kernel, before it writes anything; a
    # long double beyond the float64 range becomes inf here, and a float32
    # signalling NaN a quiet one, without a warning. Integers and float64 raise no
    # floating-point flag on the way: only narrower floats pay for np.errstate.
    # (np.asarray(arr, np.float64, order="C") without its Python call, and aligned.)
    cdef int flags = (cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_ALIGNED
                      | cnp.NPY_ARRAY_FORCECAST | cnp.NPY_ARRAY_ENSURECOPY)
    kind = arr.dtype.kind
    if kind == "f" and arr.dtype.itemsize != 8:
        with np.errstate(over="ignore", invalid="ignore"):
            pos = cnp.PyArray_FROMANY(arr, cnp.NPY_FLOAT64, 0, 0, flags)
    else:
        pos = cnp.PyArray_FROMANY(arr, cnp.NPY_FLOAT64, 0, 0, flags)
    # 64-bit integers of magnitude >= 2**53 become doubles >= 2**53, so only then
    # are the integers themselves compared (the engine's vectorized reduction of
    # the doubles is cheaper than NumPy's max and min), in a private copy of them
    # from which the doubles are made again: the values checked are the values
    # encoded, whatever another thread writes into the caller's array meanwhile.
    if kind in "iu" and arr.dtype.itemsize > 4 and not largest_magnitude(
            <const double*>cnp.PyArray_DATA(pos), cnp.PyArray_SIZE(pos)) < <double>_EXACT_LIMIT:
        integers = np.array(arr, order="C")
        if integers.max() > _EXACT_LIMIT or (kind == "i" and integers.min() < -_EXACT_LIMIT):
            raise ValueError(f"{name} must be integers of magnitude <= 2**53")
        pos = cnp.PyArray_FROMANY(integers, cnp.NPY_FLOAT64, 0, 0, flags)
    return pos


cdef tuple array_shape(cnp.ndarray array):
    """The shape NumPy itself holds for ``array`` (a subclass may override ``.shape``)."""
    cdef int k
    return tuple([cnp.PyArray_DIM(array, k) for k in range(cnp.PyArray_NDIM(array))])


cdef bint _has_shape(cnp.ndarray array, tuple shape) except -1:
    """Whether NumPy's own dims of ``array`` are ``shape`` (a tuple of ints)."""
    cdef int k, overflow = 0
    if cnp.PyArray_NDIM(array) != len(shape):
        return False
    for k in range(len(shape)):
        if (PyLong_AsLongLongAndOverflow(shape[k], &overflow) != cnp.PyArray_DIM(array, k)
                or overflow):
            return False
    return True


cpdef object adopt_out(out, tuple shape, dt, str name):
    """``out`` checked as the output of ``shape`` and dtype ``dt`` (see as_dtype):
    a numpy.ndarray, or another library's CPU array as a NumPy array of its
    memory (see _shared_array); ``name`` names it in the errors.

    ``out`` is checked from its C-level fields (dims, descr, flags): the kernels
    write through its data pointer, whatever its Python attributes claim.
    """
    if not isinstance(out, np.ndarray):
        out = _shared_array(out, name)
    cdef cnp.ndarray array = out
    descr = <object>cnp.PyArray_DESCR(array)
    if descr is not dt and not (cnp.PyArray_TYPE(array) == (<cnp.dtype>dt).type_num
                                and cnp.PyArray_ISNOTSWAPPED(array)):
        raise TypeError(f"{name} must have dtype {dt} (dtype=, or without it that of the "
                        f"first output), got {descr}")
    if not _has_shape(array, shape):
        raise ValueError(f"{name} must have shape {shape}, got {array_shape(array)}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(array) or not cnp.PyArray_ISALIGNED(array):
        raise ValueError(f"{name} must be C-contiguous and aligned")
    if not cnp.PyArray_ISWRITEABLE(array):
        raise ValueError(f"{name} must be writeable")
    return out


cdef object _shared_array(out, str name, bint write=True):
    """An ``out=`` of another library (a CPU tensor, say) as a NumPy array of its
    memory, through DLPack or the buffer protocol, which never copy: the checks
    then read that array. One that requires grad is written only where torch
    itself lets an in-place operation write it, with gradients off
    (``torch.no_grad()``, inference mode): else cpe would write behind autograd.
    Not ``write``: an input, read (detached from autograd)."""
    if not hasattr(out, "__dlpack__"):
        return _buffer_array(out, name)
    if write:
        _tensor_writable(out, name)
    if getattr(out, "requires_grad", False) is True:
        if not callable(getattr(out, "detach", None)):
            raise TypeError(f"{name} requires grad but cannot be detached from autograd")
        out = out.detach()
    torch = sys.modules.get("torch")
    bfloat16 = torch is not None and getattr(out, "dtype", None) is torch.bfloat16
    if bfloat16:  # NumPy has no bfloat16 of its own to export to: shared as its bits
        _refuse_lazy_views(out, name)  # (torch refuses their int16 view with its own error)
        out = out.view(torch.int16)
    shared = _exported(out, name, torch)
    if write:
        _shared_writeable(shared, out, name)
    return shared.view(_bfloat16(f"{name}, a torch.bfloat16 tensor,")) if bfloat16 else shared


cdef object _exported(out, str name, torch):
    """The memory of a DLPack exporter as a NumPy array. A plain torch.Tensor
    shares it through its own numpy(), the same memory and strides without the
    round trip through a DLPack capsule (the fixed cost of a decoding step); its
    numpy() refuses what DLPack would export wrongly (lazily negated or
    conjugated views). Where that fails (torch built without NumPy, another
    device, such a view...), through DLPack: then the views are refused here,
    the export's memory checked against the exporter's data_ptr(), and DLPack
    says why it cannot share what it cannot."""
    if torch is not None and type(out) is torch.Tensor:
        try:
            return out.numpy()
        except Exception:
            pass
    _refuse_lazy_views(out, name)
    try:
        shared = np.from_dlpack(out)
    except Exception as exc:  # another device, a dtype NumPy lacks, a read-only export...
        raise TypeError(f"{name} must be a CPU array whose memory NumPy can share through "
                        f"DLPack, got {type(out).__name__} ({exc})") from None
    pointer = getattr(out, "data_ptr", None)
    if (callable(pointer) and cnp.PyArray_SIZE(<cnp.ndarray>shared) != 0
            and pointer() != <size_t>cnp.PyArray_DATA(<cnp.ndarray>shared)):
        raise TypeError(f"{name}'s DLPack export is not its own memory (its data_ptr() is not "
                        "where the exported array starts): cpe would read or write elsewhere")
    return shared


cdef int _refuse_lazy_views(out, str name) except -1:
    """Refuse torch's lazily negated or conjugated views, which DLPack exports
    unresolved (the memory holds their values' negatives or conjugates)."""
    for lazy in ("is_neg", "is_conj"):
        resolved = getattr(out, lazy, None)
        if callable(resolved) and resolved():
            raise TypeError(f"{name} is a lazily negated or conjugated view: resolve it "
                            "first (resolve_neg(), resolve_conj() or clone())")
    return 0


cdef int _tensor_writable(out, str name) except -1:
    """Refuse to write into a torch tensor where torch itself would refuse an
    in-place operation: an inference tensor outside inference mode, or one that
    requires grad while autograd records."""
    if _inference_outside(out):
        raise TypeError(f"{name} is an inference tensor: outside torch.inference_mode() torch "
                        "allows no in-place update of it, and neither does cpe")
    if getattr(out, "requires_grad", False) is True and _grad_enabled():
        raise TypeError(f"{name} must not require grad: cpe would write into it behind "
                        "autograd (with gradients off, under torch.no_grad(), it may)")
    return 0


cdef int _shared_writeable(shared, out, str name) except -1:
    """Refuse an output whose memory NumPy shares read-only."""
    if cnp.PyArray_ISWRITEABLE(<cnp.ndarray>shared):
        return 0
    if _DLPACK_READ_ONLY:
        raise TypeError(f"{name}: NumPy {np.__version__} shares the memory of every "
                        "DLPack array read-only (NumPy 2.2 and newer share writable "
                        "ones writable); pass a numpy.ndarray of it instead")
    raise TypeError(f"{name} must be writeable, but NumPy shares the memory of this "
                    f"{type(out).__name__} read-only (JAX arrays cannot be changed; "
                    "unversioned DLPack, as older torch exports, cannot say it may be)")


cdef bint _inference_outside(out) except -1:
    """Whether ``out`` is a torch inference tensor while inference mode is off."""
    is_inference = getattr(out, "is_inference", None)
    if not callable(is_inference) or not is_inference():
        return False
    enabled = getattr(sys.modules.get("torch"), "is_inference_mode_enabled", None)
    return not callable(enabled) or not enabled()


cdef bint _grad_enabled() except -1:
    """Whether torch records operations for autograd (True when torch is not
    imported: then nothing says it does not)."""
    torch = sys.modules.get("torch")
    enabled = getattr(torch, "is_grad_enabled", None)
    return not callable(enabled) or bool(enabled())


# NumPy before 2.2 imports all DLPack memory read-only; later ones, memory
# exported as read-only and all of an unversioned (pre-1.0) DLPack export.
_DLPACK_READ_ONLY = tuple(int(v) for v in np.__version__.split(".")[:2]) < (2, 2)


cdef object _buffer_array(out, str name):
    """``out=`` that exports its memory through the buffer protocol (array.array,
    memoryview, bytearray...), as a NumPy array of that memory and format."""
    try:
        view = memoryview(out)
    except TypeError:
        raise TypeError(f"{name} must be a numpy.ndarray, or a CPU array that shares its "
                        f"memory through DLPack (a torch tensor, say) or the buffer protocol, "
                        f"got {type(out).__name__}") from None
    except (BufferError, ValueError) as exc:  # its exporter failed; a released memoryview
        raise ValueError(f"{name} could not share its memory through the buffer protocol "
                         f"({exc})") from None
    try:
        return np.asarray(view)
    except Exception as exc:  # a format or a layout NumPy cannot read
        raise TypeError(f"{name} must share memory that NumPy can read as an array, got "
                        f"{type(out).__name__} of format {view.format!r} ({exc})") from None


cpdef object as_rows(value, str name, bint write):
    """``value`` as a NumPy array of its memory with any strides, whose rows (its
    last axis) are contiguous: a numpy.ndarray, or another library's CPU array
    through DLPack or the buffer protocol (see _shared_array), of dtype float64,
    float32, float16 or bfloat16 and at least one dimension. ``write``: an output,
    writeable, no two of its elements in the same memory. An input whose rows are
    not contiguous is copied."""
    return _rows(_adopted(value, name, write), name, write)


cdef object _adopted(value, str name, bint write):
    """``value`` as a NumPy array of its memory (see as_rows), unchecked."""
    if not isinstance(value, np.ndarray):
        return _shared_array(value, name, write)
    if type(value) is not np.ndarray and isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{name} must not be a masked array: its mask would be ignored "
                        "(pass its data, or fill the masked values first)")
    return value


cdef object _rows(array, str name, bint write):
    """An adopted array checked (see as_rows)."""
    cdef cnp.ndarray checked = array
    cdef int type_num = cnp.PyArray_TYPE(checked)
    if not cnp.PyArray_ISNOTSWAPPED(checked) or not (
            type_num == cnp.NPY_FLOAT64 or type_num == cnp.NPY_FLOAT32
            or type_num == cnp.NPY_FLOAT16
            or (<object>cnp.PyArray_DESCR(checked)).name == "bfloat16"):
        dt = <object>cnp.PyArray_DESCR(checked)
        raise TypeError(f"{name} must have dtype {_DTYPES}, got {dt}")
    cdef int ndim = cnp.PyArray_NDIM(checked)
    if ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (its rows), got a scalar")
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(checked)
    cdef bint rows = (cnp.PyArray_DIM(checked, ndim - 1) <= 1
                      or cnp.PyArray_STRIDE(checked, ndim - 1) == itemsize
                      or cnp.PyArray_SIZE(checked) == 0)  # (nothing to read or write)
    if not write:
        if not rows or not cnp.PyArray_ISALIGNED(checked):
            array = np.ascontiguousarray(array)
        return array
    if not rows or not cnp.PyArray_ISALIGNED(checked):
        raise ValueError(f"{name} must be aligned, its last axis contiguous")
    if not cnp.PyArray_ISWRITEABLE(checked):
        raise ValueError(f"{name} must be writeable")
    if cnp.PyArray_SIZE(checked) == 0 or cnp.PyArray_IS_C_CONTIGUOUS(checked):
        return array
    # No two elements in the same bytes: along the axes in order of their strides,
    # each stride at least the span of the axes before it.
    cdef Py_ssize_t span = itemsize
    cdef int k
    axes = []
    for k in range(ndim):
        if cnp.PyArray_DIM(checked, k) > 1:
            axes.append((abs(cnp.PyArray_STRIDE(checked, k)), cnp.PyArray_DIM(checked, k)))
    for stride, extent in sorted(axes):
        if stride < span:
            raise ValueError(f"{name} must not have elements that share memory "
                             "(a broadcast or overlapping view)")
        span = stride * (extent - 1) + span
    return array


cpdef tuple as_row_arrays(x, out, bint even):
    """``x`` (an array or a tuple of them) and ``out`` as lists of NumPy arrays of
    their memory (see as_rows; ``out`` None: None), each read once and checked:
    rows of one length (even, when ``even``: pairs), outputs of their input's
    shape and dtype, sharing memory with no other array of the call unless it is
    its own input itself."""
    cdef bint single = type(x) is not tuple
    cdef list items = [x] if single else list(x)
    if not items:
        raise ValueError("x must be an array or a non-empty tuple of arrays")
    cdef Py_ssize_t count = len(items), i, j
    cdef list adopted = [], arrays = []
    for i in range(count):
        name = "x" if single else f"x[{i}]"
        adopted.append(_adopted(items[i], name, False))
        arrays.append(_rows(adopted[i], name, False))
    cdef cnp.ndarray array, result
    array = arrays[0]
    cdef Py_ssize_t width = cnp.PyArray_DIM(array, cnp.PyArray_NDIM(array) - 1)
    if even and (width % 2 or width < 2):
        raise ValueError(
            f"x's rows (its last axis) must have an even length of 2 or more, got {width}"
        )
    if width < 1:
        raise ValueError("x's rows (its last axis) must have one value or more, got 0")
    for i in range(1, count):
        array = arrays[i]
        if cnp.PyArray_DIM(array, cnp.PyArray_NDIM(array) - 1) != width:
            raise ValueError(
                f"x[{i}] must have rows of {width} values as x[0], got shape {array_shape(array)}"
            )
    if out is None:
        return arrays, None
    if single and type(out) is tuple:
        raise TypeError("out must be an array for one array x, got a tuple")
    if not single and (type(out) is not tuple or len(out) != count):
        raise TypeError(f"out must be a tuple of {count} arrays, as x")
    cdef list given = [out] if single else list(out)
    cdef list outs = []
    for i in range(count):
        name = "out" if single else f"out[{i}]"
        if given[i] is items[i]:  # x itself, in place: its memory adopted once
            itself = f"{name} (x itself)" if single else f"{name} (x[{i}] itself)"
            if not isinstance(items[i], np.ndarray) and hasattr(items[i], "__dlpack__"):
                _tensor_writable(items[i], itself)
                _shared_writeable(adopted[i], items[i], itself)
            result = _rows(adopted[i], itself, True)
        else:
            result = as_rows(given[i], name, True)
        array = arrays[i]
        if cnp.PyArray_TYPE(result) != cnp.PyArray_TYPE(array):  # (both checked: native)
            raise TypeError(f"{name} must have the dtype of x, {<object>cnp.PyArray_DESCR(array)}, "
                            f"got {<object>cnp.PyArray_DESCR(result)}")
        if cnp.PyArray_NDIM(result) != cnp.PyArray_NDIM(array) or not cnp.PyArray_CompareLists(
                cnp.PyArray_DIMS(result), cnp.PyArray_DIMS(array), cnp.PyArray_NDIM(array)):
            raise ValueError(f"{name} must have the shape of x, {array_shape(array)}, got "
                             f"{array_shape(result)}")
        outs.append(result)
    for i in range(count):
        for j in range(count):
            if i == j and same_elements(outs[i], arrays[j]):
                continue
            if _shares(outs[i], arrays[j]):
                what = "x" if single else f"x[{j}]"
                raise ValueError(
                    f"{'out' if single else f'out[{i}]'} shares memory with {what} without "
                    "being it: pass x itself (in place) or an array apart"
                )
        for j in range(i):
            if _shares(outs[i], outs[j]):
                raise ValueError(f"out[{i}] shares memory with out[{j}]")
    return arrays, outs


cdef bint same_elements(cnp.ndarray a, cnp.ndarray b) noexcept:
    """Whether two arrays are views of the same elements in the same order (their
    data, shape and strides as NumPy holds them)."""
    cdef int k
    if cnp.PyArray_DATA(a) != cnp.PyArray_DATA(b) or cnp.PyArray_NDIM(a) != cnp.PyArray_NDIM(b):
        return False
    for k in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIM(a, k) != cnp.PyArray_DIM(b, k):
            return False
        if cnp.PyArray_DIM(a, k) > 1 and cnp.PyArray_STRIDE(a, k) != cnp.PyArray_STRIDE(b, k):
            return False  # (an axis of one element is not stepped along)
    return True


cdef bint _shares(cnp.ndarray a, cnp.ndarray b) except -1:
    """Whether two arrays share memory (when too hard to tell: as if they did)."""
    cdef char* start_a
    cdef char* stop_a
    cdef char* start_b
    cdef char* stop_b
    if cnp.PyArray_SIZE(a) == 0 or cnp.PyArray_SIZE(b) == 0:
        return False
    _span(a, &start_a, &stop_a)
    _span(b, &start_b, &stop_b)
    if not (start_a < stop_b and start_b < stop_a):
        return False  # (the byte ranges they span do not meet)
    try:
        return bool(np.shares_memory(a, b, max_work=1 << 20))
    except np.exceptions.TooHardError:
        return True


cdef void _span(cnp.ndarray a, char** start, char** stop) noexcept:
    # The first byte of a non-empty array and one past its last.
    cdef char* low = <char*>cnp.PyArray_DATA(a)
    cdef char* high = low + cnp.PyArray_ITEMSIZE(a)
    cdef int k
    cdef Py_ssize_t reach
    for k in range(cnp.PyArray_NDIM(a)):
        reach = (cnp.PyArray_DIM(a, k) - 1) * cnp.PyArray_STRIDE(a, k)
        if reach < 0:
            low += reach
        else:
            high += reach
    start[0], stop[0] = low, high


cpdef object written(out):
    """``out`` once cpe has written into it: torch tensors get their version counter
    bumped, as by an in-place torch operation, so that autograd refuses values it
    saved before (torch is in sys.modules, as a tensor exists: cpe imports nothing).
    A tuple (RoPE's cos and sin): each of its arrays."""
    torch = sys.modules.get("torch")
    if torch is None:
        return out
    bump = None
    for array in (out if type(out) is tuple else (out,)):
        if type(array) is not np.ndarray and isinstance(array, torch.Tensor):
            if bump is None:
                bump = getattr(getattr(getattr(torch, "autograd", None), "graph", None),
                               "increment_version", None)
                if bump is None:
                    return out
            bump(array)
    return out


cdef bint overlap(cnp.ndarray a, cnp.ndarray b) noexcept:
    """Whether two C-contiguous arrays share memory: their byte ranges meet
    (decided from their data pointers, never dispatched to a subclass)."""
    cdef size_t start_a = <size_t>cnp.PyArray_DATA(a), start_b = <size_t>cnp.PyArray_DATA(b)
    cdef size_t size_a = cnp.PyArray_NBYTES(a), size_b = cnp.PyArray_NBYTES(b)
    return size_a != 0 and size_b != 0 and start_a < start_b + size_b and start_b < start_a + size_a


cpdef object table_start(start, Py_ssize_t rows):
    """``start`` of a table of ``rows`` rows as an int, the first and the last
    positions exact doubles, or the error naming them."""
    first = start if type(start) is int else as_integer(start, "start")
    if abs(first) > _EXACT_LIMIT or abs(first + rows) > _EXACT_LIMIT:
        raise ValueError("start and start + n must be integers of magnitude <= 2**53")
    return first
