"""Character-level dataset: every window of block_size characters predicts the next ones."""

from typing import List, Tuple

import torch
from torch.utils.data import Dataset


class CharDataset(Dataset):
    def __init__(self, path: str, block_size: int):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if len(text) <= block_size:
            raise ValueError(f"{path} has {len(text)} characters; need more than {block_size}")
        # Sorted so that every process (and every node, each with its own copy of the file)
        # derives the same vocabulary and therefore the same model shape.
        self.chars: List[str] = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.block_size = block_size
        self.data = torch.tensor(self.encode(text), dtype=torch.long)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> List[int]:
        return [self.stoi[c] for c in text]

    def decode(self, ids: List[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[i : i + self.block_size + 1]
        return chunk[:-1], chunk[1:]
