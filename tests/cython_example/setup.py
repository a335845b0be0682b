from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("downstream", ["downstream.pyx"])]))
