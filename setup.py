"""Build the Cython extensions of cpe.

Directives live here, once. Set CPE_CYTHON_CHECKS=1 to build with bounds,
wraparound and initialization checks (a debug build for CI).
"""

import os
import sys

# A 32-bit Python stops here, before anything is compiled (cpe_fill.h refuses
# such a build too): the kernels assume 64-bit sizes, and NumPy ships no 32-bit
# wheels for the platforms cpe builds on.
if sys.maxsize < 2**63 - 1:
    raise SystemExit(
        "cpe needs a 64-bit Python (this one is 32-bit): its kernels assume 64-bit sizes"
    )

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CHECKS = os.environ.get("CPE_CYTHON_CHECKS", "0") == "1"

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": CHECKS,
    "wraparound": CHECKS,
    "initializedcheck": CHECKS,
    "cdivision": True,
    "embedsignature": True,
    "freethreading_compatible": True,
}

# Never -ffast-math/-Ofast (they change the host's floating-point state) nor
# -march=native (wheels run on any CPU). Contraction into FMA is off so that
# every platform rounds the same way; the kernels call fma() where they need it.
# (cpe_rows.h compiles one function for AVX2 + FMA with a target attribute and
# picks it at run time: wheels still run on any x86-64.)
FLAGS = {
    "msvc": ["/O2", "/fp:precise"],
    "unix": ["-O3", "-ffp-contract=off"],
}
# No debug information unless CFLAGS asks for it (the sanitizer and valgrind builds
# do): the interpreter's own CFLAGS carry -g, which would make the wheels four
# times larger.
if not any(flag.startswith("-g") for flag in os.environ.get("CFLAGS", "").split()):
    FLAGS["unix"].append("-g0")


class BuildExt(build_ext):
    def build_extensions(self) -> None:
        flags = FLAGS.get(self.compiler.compiler_type, FLAGS["unix"])
        for ext in self.extensions:
            ext.extra_compile_args = flags + ext.extra_compile_args
        super().build_extensions()


extensions = [
    # The engine: cpe_rows.h, the vectorized sine/cosine row loop (C, header only);
    # cpe_memory.h, whether memory is mapped yet; cpe_fill.h, the digit levels.
    Extension(
        "cpe._engine",
        ["src/cpe/_engine.pyx"],
        include_dirs=["src/cpe"],
        depends=["src/cpe/cpe_rows.h", "src/cpe/cpe_memory.h", "src/cpe/cpe_fill.h"],
    ),
    # The C API, over the engine.
    Extension(
        "cpe.kernels",
        ["src/cpe/kernels.pyx"],
        include_dirs=["src/cpe"],
        depends=["src/cpe/cpe_fill.h"],
    ),
    # The checks on top, and _core, the engine's Python face: they read (and _core
    # allocates) arrays through NumPy's C API.
    Extension(
        "cpe._args",
        ["src/cpe/_args.pyx"],
        include_dirs=[np.get_include(), "src/cpe"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    Extension(
        "cpe._core",
        ["src/cpe/_core.pyx"],
        include_dirs=[np.get_include(), "src/cpe"],
        depends=["src/cpe/cpe_memory.h", "src/cpe/cpe_fill.h"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=DIRECTIVES,
        include_path=["src"],
        # The generated C goes to a folder per set of directives, so that turning
        # the checks on or off never reuses C (or objects) made for the other set.
        build_dir="build/cython-checks" if CHECKS else "build/cython",
    ),
    cmdclass={"build_ext": BuildExt},
)
