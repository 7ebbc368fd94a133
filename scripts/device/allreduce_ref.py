"""allreduce_ref.py: a reference all-reduce for p2pcheck's NCCL phase, with PyTorch's
torch.distributed over NCCL and one process per GPU (the way training jobs run), timed
the way nccl-tests and p2pcheck time it: int32 sum, 1 warm-up and 1 check iteration,
then N timed iterations (20; a quarter, at least 2, above 256 MiB) under a host wall
clock with a device synchronize; algbw = bytes / t, busbw = algbw * 2(n-1)/n.
Rank 0 prints one line per size: "BYTES ALGBW BUSBW WRONG".

    python3 scripts/device/allreduce_ref.py [MAX_BYTES]
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def sizes(max_bytes):
    b = 8
    while b <= max_bytes:
        yield b
        b *= 2


def iters_for(nbytes):
    return max(2, 20 // 4) if nbytes > (256 << 20) else 20


def worker(rank, world, max_bytes, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    for nbytes in sizes(max_bytes):
        count = nbytes // 4
        idx = torch.arange(count, device="cuda", dtype=torch.int64)
        # Small integers so the int32 sum is exact: (i*r*2654435761 mod 4096) - 2048.
        x = (((idx * (rank + 1) * 2654435761) % 4096) - 2048).to(torch.int32)
        want = torch.zeros(count, device="cuda", dtype=torch.int64)
        for r in range(world):
            want += ((idx * (r + 1) * 2654435761) % 4096) - 2048
        y = x.clone()
        dist.all_reduce(y)  # warm-up and check
        torch.cuda.synchronize()
        wrong = int((y.to(torch.int64) != want).sum().item())
        n = iters_for(nbytes)
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t = (time.perf_counter() - t0) / n
        algbw = nbytes / t / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(f"{nbytes} {algbw:.3f} {busbw:.3f} {wrong}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 30
    world = torch.cuda.device_count()
    mp.spawn(worker, args=(world, max_bytes, 29517), nprocs=world)
