"""Trains the character GPT with DDP. Start it with torchrun:

    torchrun --nproc_per_node=2 main.py
    torchrun --nnodes=2 --nproc_per_node=2 --master_addr=HEAD --master_port=8008 \
        --node_rank=R main.py --max_epochs 10
"""

import argparse
import os

import torch
import torch.distributed as dist

from char_dataset import CharDataset
from model import GPT, GPTConfig
from trainer import Trainer, TrainerConfig, init_distributed, log

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None) -> argparse.Namespace:
    defaults = TrainerConfig()
    p = argparse.ArgumentParser(description="Train a small character-level GPT with DDP.")
    p.add_argument("--max_epochs", type=int, default=defaults.max_epochs)
    p.add_argument("--batch_size", type=int, default=defaults.batch_size, help="per process")
    p.add_argument("--save_every", type=int, default=defaults.save_every, help="in epochs")
    p.add_argument(
        "--snapshot_path",
        default=defaults.snapshot_path,
        help="written by global rank 0; training resumes from it when it exists",
    )
    p.add_argument("--data_path", default=os.path.join(HERE, "data", "input.txt"))
    p.add_argument(
        "--max_iters",
        type=int,
        default=defaults.max_iters,
        help="iterations per epoch at most (0: the whole shard)",
    )
    p.add_argument("--log_every", type=int, default=defaults.log_every)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--block_size", type=int, default=32)
    p.add_argument("--n_layer", type=int, default=2)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_embd", type=int, default=48)
    p.add_argument("--sample_chars", type=int, default=200, help="printed by rank 0 at the end")
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args(argv)
    for name in ("max_epochs", "batch_size", "save_every", "log_every", "block_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.max_iters < 0 or args.sample_chars < 0:
        p.error("--max_iters and --sample_chars must not be negative")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    env = init_distributed()
    try:
        # The same seed everywhere; DDP also broadcasts rank 0's weights when it wraps the model.
        torch.manual_seed(args.seed)
        dataset = CharDataset(args.data_path, args.block_size)
        config = GPTConfig(
            vocab_size=dataset.vocab_size,
            block_size=args.block_size,
            n_layer=args.n_layer,
            n_head=args.n_head,
            n_embd=args.n_embd,
        )
        model = GPT(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        trainer_config = TrainerConfig(
            max_epochs=args.max_epochs,
            batch_size=args.batch_size,
            save_every=args.save_every,
            snapshot_path=args.snapshot_path,
            max_iters=args.max_iters,
            log_every=args.log_every,
        )
        trainer = Trainer(trainer_config, env, model, optimizer, dataset, dataset.chars)
        trainer.train()
        if env.rank == 0 and args.sample_chars > 0:
            gpt = trainer.model.module
            gpt.eval()
            context = dataset.data[:1].unsqueeze(0).to(env.device)
            text = dataset.decode(gpt.generate(context, args.sample_chars)[0].tolist())
            log(f"{env.label} Sample:\n{text}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
