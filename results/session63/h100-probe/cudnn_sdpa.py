import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(1, 12, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
torch.cuda.synchronize()
torch.cuda.profiler.start()
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(8):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("sdpa done", o.shape)
