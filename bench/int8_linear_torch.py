# PyTorch dynamic int8 Linear (quantize_dynamic, qint8 weights) beside fp32 nn.Linear, the shapes of
# bench_matmul BM_linear_*; 2 threads. Run: PYENV_VERSION=system OMP_WAIT_POLICY=passive python3 bench/int8_linear_torch.py
import time, torch
torch.set_num_threads(2)
print("torch", torch.__version__, "engine", torch.backends.quantized.engine)
for M in (1, 20, 100, 500):
    for O, K in ((256, 256), (1024, 256), (256, 1024), (17496, 256)):
        lin = torch.nn.Linear(K, O)
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
        x = torch.randn(M, K)
        res = []
        for m in (lin, q):
            with torch.no_grad():
                for _ in range(5): m(x)
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < 0.2: m(x); n += 1
                res.append((time.perf_counter() - t0) / n * 1e6)
        print(f"M={M} O={O} K={K} torch_fp32_us={res[0]:.1f} torch_int8_us={res[1]:.1f}")
