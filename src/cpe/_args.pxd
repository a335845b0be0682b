# The checks on top (see _args.pyx), cimported by _core. Private.
cimport numpy as cnp

cpdef Py_ssize_t as_count(value, str name, Py_ssize_t minimum) except -1
cpdef object as_integer(value, str name)
cpdef list as_sequence(value, str name, str what, Py_ssize_t length=*)
cpdef double as_real(value, str name) except? -1.0
cpdef double as_positive(value, str name) except? -1.0
cpdef object as_choice(value, str name, options)
cpdef object as_dtype(dtype, out=*, str out_name=*)
cpdef object as_positions(position, str name)
cdef object positions_float64(arr, str name)
cdef bint exact_integer(value, double* x) except -1
cdef bint scalar_position(position, double* p) except -1
cdef tuple array_shape(cnp.ndarray array)
cpdef object adopt_out(out, tuple shape, dt, str name)
cpdef object as_rows(value, str name, bint write)
cpdef tuple as_row_arrays(x, out, bint even)
cpdef object written(out)
cdef bint overlap(cnp.ndarray a, cnp.ndarray b) noexcept
cpdef object table_start(start, Py_ssize_t rows)
