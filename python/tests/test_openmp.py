# `import qkv` gives OpenMP passive waiting as the qkv program has it (cli.test_openmp_env), without
# the user setting OMP_WAIT_POLICY, and keeps a user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT. Checked
# in libgomp's own state (omp_display_env's GOMP_SPINCOUNT: 0 is passive), in fresh interpreters
# whose environment lacks both variables (ctest's and pytest's settings must not hide the default).
import os
import re
import subprocess
import sys

SHOW = "import ctypes; ctypes.CDLL('libgomp.so.1').omp_display_env(1)"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_DISPLAY_ENV")}
    env.update(extra)
    return env


def spin_count(stderr):
    """libgomp's GOMP_SPINCOUNT as omp_display_env printed it."""
    counts = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", stderr)
    assert counts, stderr
    return int(counts[-1])


def python_spin_count(code, **extra):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(**extra), timeout=120)
    assert r.returncode == 0, r.stderr
    return spin_count(r.stderr)


def test_import_qkv_makes_openmp_wait_passively():
    # The control: libgomp on its own spins (so the check below can fail).
    assert python_spin_count(SHOW) > 0
    assert python_spin_count("import qkv; " + SHOW) == 0
    # Seen by Python code and by child processes too.
    out = subprocess.run([sys.executable, "-c", "import os, qkv, subprocess; print(os.environ['OMP_WAIT_POLICY'], "
                          "subprocess.run(['sh', '-c', 'echo $OMP_WAIT_POLICY'], capture_output=True, text=True).stdout)"],
                         capture_output=True, text=True, env=clean_env(), timeout=120)
    assert out.stdout.split() == ["passive", "passive"], out.stderr


def test_a_users_choice_is_kept():
    assert python_spin_count("import qkv; " + SHOW, OMP_WAIT_POLICY="active") == 30_000_000_000
    assert python_spin_count("import qkv; " + SHOW, GOMP_SPINCOUNT="1234") == 1234
    r = subprocess.run([sys.executable, "-c", "import os, qkv; print(os.environ.get('OMP_WAIT_POLICY'))"],
                       capture_output=True, text=True, env=clean_env(GOMP_SPINCOUNT="1234"), timeout=120)
    assert r.stdout.strip() == "None", r.stderr
