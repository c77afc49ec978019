# Builds the extension module qkv._qkv with CMake (the project's own build: libqkv + python/),
# for `pip install --no-build-isolation .` (pyproject.toml holds the metadata). Offline: CMake,
# Ninja, pybind11 and the library's dependencies come from Debian (scripts/install_deps.sh).
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = Path(self.get_ext_fullpath(ext.name)).resolve()
        tmp = Path(self.build_temp).resolve() / "cmake"
        tmp.mkdir(parents=True, exist_ok=True)
        cfg = ["cmake", "-S", str(ROOT), "-B", str(tmp), "-DCMAKE_BUILD_TYPE=Release",
               f"-DPython_EXECUTABLE={sys.executable}", "-DQKV_BUILD_PYTHON=ON", "-DQKV_BUILD_TESTS=OFF",
               "-DQKV_BUILD_BENCH=OFF", "-DQKV_BUILD_APPS=OFF", "-DQKV_BUILD_EXAMPLES=OFF"]
        if shutil.which("ninja"):
            cfg += ["-G", "Ninja"]
        if shutil.which("ccache"):
            cfg += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        subprocess.run(cfg, check=True)
        jobs = os.environ.get("JOBS", str(os.cpu_count() or 1))
        name = ext.name.split(".")[-1]  # _qkv, or _openmp (python/CMakeLists.txt)
        subprocess.run(["cmake", "--build", str(tmp), "--target", name, "-j", jobs], check=True)
        built = next((tmp / "python" / "qkv").glob(name + "*.so"))
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, out)


setup(ext_modules=[Extension("qkv._openmp", sources=[]), Extension("qkv._qkv", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
