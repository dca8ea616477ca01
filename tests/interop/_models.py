"""Small torch models and their flaxen (Linen and NNX) twins, shared by the model tests."""

import flaxen.linen as nn
from flaxen import nnx
from tests.interop._helpers import torch

tnn = torch.nn


class TorchBlock(tnn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                             tnn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class TorchResNet(tnn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = tnn.Conv2d(3, 4, 3, padding=1)
        self.bn = tnn.BatchNorm2d(4)
        self.pool = tnn.AvgPool2d(2)
        self.layer1 = TorchBlock(4, 4, 1)
        self.layer2 = TorchBlock(4, 8, 2)
        self.fc = tnn.Linear(8, classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(x.mean(dim=(2, 3)))


def randomize_bn_stats(model) -> None:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, tnn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


class Block(nn.Module):
    features: int
    stride: int

    @nn.compact
    def __call__(self, x):
        bn = lambda: nn.BatchNorm(use_running_average=True, epsilon=1e-5)  # noqa: E731
        s = (self.stride, self.stride)
        y = nn.Conv(self.features, (3, 3), s, padding=[(1, 1), (1, 1)], use_bias=False)(x)
        y = nn.relu(bn()(y))
        y = nn.Conv(self.features, (3, 3), padding=[(1, 1), (1, 1)], use_bias=False)(y)
        y = bn()(y)
        if self.stride != 1 or x.shape[-1] != self.features:
            x = nn.Conv(self.features, (1, 1), s, padding="VALID", use_bias=False)(x)
            x = bn()(x)
        return nn.relu(y + x)


class ResNet(nn.Module):
    classes: int = 5

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(4, (3, 3), padding=[(1, 1), (1, 1)])(x)
        x = nn.relu(nn.BatchNorm(use_running_average=True, epsilon=1e-5)(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = Block(4, 1)(x)
        x = Block(8, 2)(x)
        return nn.Dense(self.classes)(x.mean(axis=(1, 2)))


class Encoder(nn.Module):
    """torch.nn.TransformerEncoderLayer (post-norm, ReLU) in Linen."""

    d_model: int = 8
    heads: int = 2
    ff: int = 16

    @nn.compact
    def __call__(self, x, mask):
        a = nn.MultiHeadDotProductAttention(num_heads=self.heads)(x, x, mask=mask)
        x = nn.LayerNorm(epsilon=1e-5)(x + a)
        h = nn.Dense(self.d_model)(nn.relu(nn.Dense(self.ff)(x)))
        return nn.LayerNorm(epsilon=1e-5)(x + h)


class TorchLM(tnn.Module):
    def __init__(self, vocab=11, emb=6, hidden=5):
        super().__init__()
        self.embed = tnn.Embedding(vocab, emb)
        self.lstm = tnn.LSTM(emb, hidden, num_layers=2, batch_first=True)
        self.head = tnn.Linear(hidden, vocab)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


class LM(nn.Module):
    vocab: int = 11
    emb: int = 6
    hidden: int = 5

    @nn.compact
    def __call__(self, ids):
        x = nn.Embed(self.vocab, self.emb)(ids)
        x = nn.RNN(nn.LSTMCell(self.hidden))(x)
        x = nn.RNN(nn.LSTMCell(self.hidden))(x)
        return nn.Dense(self.vocab)(x)


class NnxCNN(nnx.Module):
    """Conv -> BatchNorm -> ReLU -> flatten -> Linear -> LayerNorm, NNX style."""

    def __init__(self, rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), padding=[(1, 1), (1, 1)], rngs=rngs)
        self.bn = nnx.BatchNorm(4, use_running_average=True, epsilon=1e-5, rngs=rngs)
        self.fc = nnx.Linear(4 * 4 * 4, 6, rngs=rngs)
        self.ln = nnx.LayerNorm(6, epsilon=1e-5, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv(x)))
        return self.ln(self.fc(x.reshape(x.shape[0], -1)))


class TorchCNN(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(3, 4, 3, padding=1)
        self.bn = tnn.BatchNorm2d(4)
        self.fc = tnn.Linear(4 * 4 * 4, 6)
        self.ln = tnn.LayerNorm(6)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.ln(self.fc(x.flatten(1)))
