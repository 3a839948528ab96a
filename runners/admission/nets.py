"""The admission networks, in torch: HEIMDALL's network (128 and 16 ReLU units, one sigmoid output)
and the LinnOS-style 256-unit network, trained either as a classifier (slow or fast, with class
weight b on the slow class and the log-odds bias initialiser) or as a regressor of latency with
ML-MittOS's asymmetric MSE (Eq. 3.4), whose prediction is compared with a failover threshold.
torch is imported here and only here (the ``rl`` extra).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from storetune.runners.admission.spec import NETWORKS, Decider, TrainSpec


def network(kind: str, n_features: int) -> nn.Sequential:
    if kind == "heimdall":
        return nn.Sequential(nn.Linear(n_features, 128), nn.ReLU(), nn.Linear(128, 16), nn.ReLU(), nn.Linear(16, 1))
    if kind == "linnos":
        return nn.Sequential(nn.Linear(n_features, 256), nn.ReLU(), nn.Linear(256, 1))
    raise ValueError(f"unknown network {kind!r}; known: {', '.join(NETWORKS)}")


def amse(predicted: torch.Tensor, target: torch.Tensor, bias: float) -> torch.Tensor:
    """ML-MittOS Eq. 3.4: (y - y_hat)^2 (sign(y - y_hat) + b)^2, averaged. b = 0 is the MSE; b > 0
    weighs under-estimates of the latency more and over-estimates less."""
    error = target - predicted
    return (error**2 * (torch.sign(error) + bias) ** 2).mean()


class Model(Decider):
    """A trained network with what it needs to decide: scores, and EBUSY decisions."""

    def __init__(self, spec: TrainSpec, net: nn.Sequential, latency_scale: float):
        self.spec, self.net, self.latency_scale = spec, net.eval(), latency_scale

    @torch.no_grad()
    def scores(self, X: np.ndarray) -> np.ndarray:
        """The classifier's probability of slow, or the regressor's predicted latency in microseconds."""
        out = self.net(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).squeeze(1).numpy()
        if self.spec.kind == "classifier":
            return 1.0 / (1.0 + np.exp(-out.astype(np.float64)))
        return out.astype(np.float64) * self.latency_scale


def train_network(X: np.ndarray, target: np.ndarray, spec: TrainSpec) -> Decider:
    """Train a network on rows X (already scaled) for labels (classifier) or latencies (regressor)."""
    torch.manual_seed(spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    net = network(spec.network, X.shape[1])
    x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
    if spec.kind == "classifier":
        y = torch.from_numpy(target.astype(np.float32))
        positive = float(target.mean())
        if 0 < positive < 1:  # start at the base rate: log odds of slow (ML-MittOS 3.1, after Keras' guide)
            with torch.no_grad():
                net[-1].bias.fill_(float(np.log(positive / (1 - positive))))
        loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(spec.class_weight))
        scale = 1.0
    else:
        scale = float(np.mean(target)) or 1.0  # predict latency in units of the mean: well-conditioned
        y = torch.from_numpy((target / scale).astype(np.float32))

        def loss_fn(predicted: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
            return amse(predicted, wanted, spec.loss_bias)

    optimiser = torch.optim.Adam(net.parameters(), lr=spec.learning_rate)
    for _ in range(spec.epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), spec.batch_size):
            batch = order[start : start + spec.batch_size]
            optimiser.zero_grad()
            loss = loss_fn(net(x[batch]).squeeze(1), y[batch])
            loss.backward()
            optimiser.step()
    return Model(spec, net, scale)




def one_thread() -> None:
    torch.set_num_threads(1)
