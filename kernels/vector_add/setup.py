# Seed 002's package build: `pip install .` here gives an importable `example_kernels`.
# jitlab.load("kernels/vector_add") builds the same two files in seconds, without installing.
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
__version__ = "0.0.1"
# Define the C++ extension modules
ext_modules = [
    CUDAExtension('example_kernels', [
        'vector_add_binding.cpp',
        'vector_add.cu',
    ]),
]
setup(
    name="cuda_basics",
    version=__version__,
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExtension}
)
