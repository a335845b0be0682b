from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    name="cpe-downstream-example",
    ext_modules=cythonize([Extension("downstream", ["downstream.pyx"])]),
)
