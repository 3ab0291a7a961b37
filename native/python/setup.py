"""Build script behind pyproject.toml.

setuptools-rust builds the `cachalot` crate (native/Cargo.toml) as a plain cdylib, no Python
bindings: cachalot_torch loads it with ctypes. build_py copies the extension's sources and the
header from the repository into cachalot_native, so the installed package needs no checkout.
Invariant: the installed cachalot_native holds libcachalot.so, include/cachalot.h and torch/*.
"""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools_rust import Binding, RustExtension

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class BuildWithSources(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "cachalot_native")
        for folder, pattern in (("torch", os.path.join(REPO, "native", "torch", "*")),
                                ("include", os.path.join(REPO, "include", "cachalot.h"))):
            os.makedirs(os.path.join(target, folder), exist_ok=True)
            for path in glob.glob(pattern):
                shutil.copy(path, os.path.join(target, folder))


setup(
    py_modules=["cachalot_torch", "cachalot_replay"],
    packages=["cachalot_native"],
    rust_extensions=[RustExtension("cachalot_native.libcachalot", path=os.path.join(REPO, "native", "Cargo.toml"),
                                   binding=Binding.NoBinding, py_limited_api=False)],
    cmdclass={"build_py": BuildWithSources},
    zip_safe=False,
)
