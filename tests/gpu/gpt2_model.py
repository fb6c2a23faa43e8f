"""GPT-2 small fp16 inference, batch 8x128, random weights: the model the GPU checks measure."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def model_and_input(warmup=0):
    """The model and its input, after `warmup` steps (synchronized)."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda().half().eval()
    ids = torch.randint(0, 50257, (8, 128), device="cuda")
    for _ in range(warmup):
        step(model, ids)
    torch.cuda.synchronize()
    return model, ids


def step(model, ids):
    with torch.no_grad():
        model(ids)
