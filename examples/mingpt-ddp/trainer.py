"""DDP trainer: one model replica per process, gradients all-reduced by DistributedDataParallel.

Each process is started by torchrun, which sets LOCAL_RANK, RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT. Global rank 0 alone writes the snapshot; at start rank 0 reads it, if present, and
broadcasts it, so that resuming works even when the other nodes have no copy of the file.
"""

import os
import sys
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

# Names this trainer reads from the environment.
FAIL_RANK_ENV = "MINGPT_FAIL_RANK"


def log(line: str) -> None:
    """Prints one line in one write, so that lines of processes sharing a pipe never interleave
    (print() writes the text and the newline separately when stdout is unbuffered)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@dataclass
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device

    @property
    def label(self) -> str:
        """The log prefix: "[GPU3]" or "[CPU3]", by global rank as in the PyTorch example."""
        kind = "GPU" if self.device.type == "cuda" else "CPU"
        return f"[{kind}{self.rank}]"


def init_distributed() -> DistEnv:
    """Joins the process group that torchrun set up; nccl with CUDA, gloo without."""
    missing = [k for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE") if k not in os.environ]
    if missing:
        raise SystemExit(
            f"{', '.join(missing)} not set: start this with torchrun, "
            "e.g. torchrun --nproc_per_node=2 main.py"
        )
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        backend = "gloo"
        device = torch.device("cpu")
    master = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    log(
        f"world_size={world_size} rank={rank} local_rank={local_rank} "
        f"backend={backend} master={master}"
    )
    dist.init_process_group(backend=backend)
    return DistEnv(rank, local_rank, world_size, backend, device)


@dataclass
class TrainerConfig:
    # Sized so that 4 processes on 2 CPU cores finish in well under a minute (Debian's torch
    # uses the reference BLAS) while the loss falls from ~4.3 (uniform over ~75 characters)
    # to ~2.5.
    max_epochs: int = 4
    batch_size: int = 16
    save_every: int = 2
    snapshot_path: str = "gpt_snapshot.pt"
    # Iterations per epoch at most; 0 runs the whole shard of the dataset (~750 iterations
    # with 4 processes).
    max_iters: int = 25
    log_every: int = 5
    grad_norm_clip: float = 1.0


class Trainer:
    def __init__(
        self,
        config: TrainerConfig,
        env: DistEnv,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        dataset: Dataset,
        vocab: List[str],
    ):
        self.config = config
        self.env = env
        self.vocab = vocab
        self.optimizer = optimizer
        self.epochs_run = 0
        self.sampler = DistributedSampler(dataset, shuffle=True)
        self.loader = DataLoader(
            dataset,
            batch_size=config.batch_size,
            sampler=self.sampler,
            pin_memory=env.device.type == "cuda",
        )
        fail_rank = os.environ.get(FAIL_RANK_ENV, "")
        self.fail_after_first_iter = fail_rank != "" and int(fail_rank) == env.rank
        model = model.to(env.device)
        self._load_snapshot(model)
        device_ids = [env.local_rank] if env.device.type == "cuda" else None
        self.model = DDP(model, device_ids=device_ids)

    def _load_snapshot(self, model: torch.nn.Module) -> None:
        snapshot: List[Optional[dict]] = [None]
        if self.env.rank == 0 and os.path.exists(self.config.snapshot_path):
            snapshot[0] = torch.load(self.config.snapshot_path, map_location="cpu")
        dist.broadcast_object_list(snapshot, src=0)
        if snapshot[0] is None:
            return
        if snapshot[0]["VOCAB"] != self.vocab:
            raise SystemExit(
                f"{self.config.snapshot_path} was trained on another text (its vocabulary "
                "differs); remove it or pass --snapshot_path to start afresh"
            )
        model.load_state_dict(snapshot[0]["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot[0]["OPTIMIZER_STATE"])
        self.epochs_run = snapshot[0]["EPOCHS_RUN"]
        log(f"{self.env.label} Resuming training from snapshot at Epoch {self.epochs_run}")

    def _save_snapshot(self, epochs_run: int) -> None:
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epochs_run,
            "VOCAB": self.vocab,
        }
        path = self.config.snapshot_path
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        # Write then rename, so that a run killed mid-save leaves the previous snapshot intact.
        tmp = f"{path}.tmp.{os.getpid()}"
        torch.save(snapshot, tmp)
        os.replace(tmp, path)
        log(f"{self.env.label} Epoch {epochs_run - 1} | Training snapshot saved at {path}")

    def _run_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        iters = len(self.loader)
        if self.config.max_iters > 0:
            iters = min(iters, self.config.max_iters)
        log(
            f"{self.env.label} Epoch {epoch} | Batchsize: {self.config.batch_size} | Steps: {iters}"
        )
        self.model.train()
        for it, (x, y) in enumerate(self.loader):
            if it >= iters:
                break
            x = x.to(self.env.device, non_blocking=True)
            y = y.to(self.env.device, non_blocking=True)
            _, loss = self.model(x, y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here.
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)
            self.optimizer.step()
            if it % self.config.log_every == 0 or it == iters - 1:
                log(
                    f"{self.env.label} Epoch {epoch} | Iter {it} | Train Loss {loss.item():.5f}"
                )
            if self.fail_after_first_iter:
                raise RuntimeError(
                    f"{FAIL_RANK_ENV}={self.env.rank}: injected failure after the first iteration"
                )

    def train(self) -> None:
        if self.epochs_run >= self.config.max_epochs:
            log(
                f"{self.env.label} Nothing to train: the snapshot has {self.epochs_run} epochs, "
                f"--max_epochs is {self.config.max_epochs}"
            )
            return
        for epoch in range(self.epochs_run, self.config.max_epochs):
            self._run_epoch(epoch)
            last = epoch == self.config.max_epochs - 1
            if self.env.rank == 0 and ((epoch + 1) % self.config.save_every == 0 or last):
                self._save_snapshot(epoch + 1)
