"""The verifier: a small CNN over the three screens and the pointer plane, conditioned on the
instruction (FiLM, as the pixel policy is), with the typed words and the action counts beside it;
one logit, P(the page would say success). A few hundred thousand parameters: it trains on two CPU
cores in minutes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.verifier.features import IMAGE_CHANNELS, N_COUNTS, Batch


class VerifierNet(nn.Module):
    def __init__(self, side: int = 64, buckets: int = 4096, dim: int = 32, channels: int = 32,
                 image_channels: int = IMAGE_CHANNELS) -> None:
        super().__init__()
        if image_channels != IMAGE_CHANNELS:
            raise ValueError(f"a model of {image_channels} image planes; the features have {IMAGE_CHANNELS}: "
                             "it was trained on another feature layout, train it again")
        self.config = {"side": side, "buckets": buckets, "dim": dim, "channels": channels,
                       "image_channels": image_channels}
        self.convs = nn.ModuleList([
            nn.Conv2d(IMAGE_CHANNELS, 16, 5, stride=2, padding=2),
            nn.Conv2d(16, channels, 3, stride=2, padding=1),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1),
        ])
        self.words = nn.EmbeddingBag(buckets, dim, mode="mean")
        self.film = nn.Linear(dim, 2 * channels)
        self.counts = nn.Linear(N_COUNTS, 16)
        self.head = nn.Sequential(nn.Linear(2 * channels + 3 * dim + 16, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, batch: Batch) -> torch.Tensor:
        """-> logits [N]."""
        h = batch.images.to(torch.float32) / 255.0
        for conv in self.convs:
            h = F.relu(conv(h))
        words = self.words(*batch.words)
        typed = self.words(*batch.typed)
        gamma, beta = self.film(words).chunk(2, dim=-1)
        h = F.relu(h * (1 + gamma[:, :, None, None]) + beta[:, :, None, None])
        pooled = torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3)), words, typed, words * typed,
                            F.relu(self.counts(batch.counts))], dim=-1)
        return self.head(pooled).squeeze(-1)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor, pos_weight: float = 1.0) -> torch.Tensor:
    """Binary cross-entropy; ``pos_weight`` > 1 when successes are rarer than failures."""
    return F.binary_cross_entropy_with_logits(logits, labels.to(torch.float32),
                                              pos_weight=torch.tensor(pos_weight))


def train_step(model: VerifierNet, opt: torch.optim.Optimizer, batch: Batch, labels: torch.Tensor,
               pos_weight: float = 1.0) -> float:
    model.train()
    loss = loss_fn(model(batch), labels, pos_weight)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


@torch.no_grad()
def predict(model: VerifierNet, batch: Batch, chunk: int = 256) -> torch.Tensor:
    """P(success) [N]."""
    model.eval()
    parts = [torch.sigmoid(model(batch.take(range(i, min(i + chunk, len(batch))))))
             for i in range(0, len(batch), chunk)]
    return torch.cat(parts) if parts else torch.zeros(0)
