"""Small networks built the way Paddle's model zoos build their architectures (PaddleClas' ConvNeXt
and Swin, PaddleSeg's UNet and DeepLabV3+ ASPP, PaddleDetection's PP-YOLOE-style anchor-free head,
PaddleNLP's GPT, PaddleOCR's CRNN), random weights, each with the idioms that made the zoos' exported
models fail to load: dynamic image and sequence sizes, sizes read from shapes, roll, meshgrid, triu,
transposed convs. ``ZOO`` gives each its input spec (``None`` where the zoo exports a dynamic dim),
dtype and two call shapes."""

from __future__ import annotations

from typing import NamedTuple

import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class ConvNeXtBlock(nn.Layer):
    """A patchify stem, a 7x7 depthwise conv, layer norm channels-last, an MLP, layer scale."""

    def __init__(self, d=16):
        super().__init__()
        self.stem = nn.Conv2D(3, d, 4, stride=4)
        self.dw = nn.Conv2D(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d)
        self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = self.create_parameter([d], default_initializer=nn.initializer.Constant(0.5))

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x).transpose([0, 2, 3, 1])
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.transpose([0, 3, 1, 2])


class SwinBlock(nn.Layer):
    """Shifted-window attention: rolls, windows as reshapes and transposes, attention per window."""

    def __init__(self, d=16, w=4, heads=2):
        super().__init__()
        self.w, self.heads = w, heads
        self.embed = nn.Conv2D(3, d, 2, stride=2)
        self.norm = nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        x = self.embed(x)
        _, C, H, W = x.shape  # static: Swin's windows need the image size the zoo exports with
        x = x.flatten(2).transpose([0, 2, 1])  # B, HW, C
        h = self.norm(x).reshape([-1, H, W, C])
        h = paddle.roll(h, shifts=(-2, -2), axis=(1, 2))
        w = self.w
        h = h.reshape([-1, H // w, w, W // w, w, C]).transpose([0, 1, 3, 2, 4, 5]).reshape([-1, w * w, C])
        qkv = self.qkv(h).reshape([-1, w * w, 3, self.heads, C // self.heads]).transpose([2, 0, 3, 1, 4])
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = F.softmax(q @ k.transpose([0, 1, 3, 2]) * (C // self.heads) ** -0.5, axis=-1)
        h = (a @ v).transpose([0, 2, 1, 3]).reshape([-1, w * w, C])
        h = (
            self.proj(h)
            .reshape([-1, H // w, W // w, w, w, C])
            .transpose([0, 1, 3, 2, 4, 5])
            .reshape([-1, H, W, C])
        )
        h = paddle.roll(h, shifts=(2, 2), axis=(1, 2))
        return x + h.reshape([-1, H * W, C])


class UNet(nn.Layer):
    """Down, a transposed conv up, the skip concatenated."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2D(3, 8, 3, stride=2, padding=1)
        self.mid = nn.Conv2D(8, 8, 3, padding=1)
        self.up = nn.Conv2DTranspose(8, 8, 2, stride=2)
        self.out = nn.Conv2D(11, 2, 3, padding=1)

    def forward(self, x):
        d = F.relu(self.down(x))
        u = self.up(F.relu(self.mid(d)))
        return self.out(paddle.concat([x, u], axis=1))


class DeepLabASPP(nn.Layer):
    """ASPP: a dilated branch, image pooling resized to the features' size, logits to the input's."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2D(3, 8, 3, stride=2, padding=1)
        self.b1 = nn.Conv2D(8, 4, 1)
        self.b2 = nn.Conv2D(8, 4, 3, padding=2, dilation=2)
        self.pool = nn.Conv2D(8, 4, 1)
        self.head = nn.Conv2D(12, 2, 1)

    def forward(self, x):
        f = F.relu(self.stem(x))
        p = F.interpolate(self.pool(F.adaptive_avg_pool2d(f, 1)), size=paddle.shape(f)[2:], mode="bilinear")
        y = self.head(paddle.concat([self.b1(f), self.b2(f), p], axis=1))
        return F.interpolate(y, size=paddle.shape(x)[2:], mode="bilinear")


class YoloHead(nn.Layer):
    """An anchor-free head: a meshgrid of aranges over the feature map's size, boxes around it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2D(3, 8, 3, stride=4, padding=1)
        self.cls, self.reg = nn.Conv2D(8, 3, 1), nn.Conv2D(8, 4, 1)

    def forward(self, x):
        f = F.relu(self.stem(x))
        h, w = paddle.shape(f)[2], paddle.shape(f)[3]
        sy, sx = paddle.meshgrid(paddle.arange(h, dtype="float32"), paddle.arange(w, dtype="float32"))
        anchors = paddle.stack([sx, sy], axis=-1).reshape([-1, 2]) * 4.0
        cls = F.sigmoid(self.cls(f)).flatten(2).transpose([0, 2, 1])
        reg = self.reg(f).flatten(2).transpose([0, 2, 1])
        lt, rb = paddle.split(reg, 2, axis=-1)
        boxes = paddle.concat([anchors - lt, anchors + rb], axis=-1)
        return cls, boxes


class GPT(nn.Layer):
    """Positions from ``arange`` of the sequence length, a causal mask from ``triu`` of a full."""

    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(64, d)
        self.enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, normalize_before=True), 1
        )
        self.out = nn.Linear(d, vocab)

    def forward(self, ids):
        s = paddle.shape(ids)[1]
        pos = paddle.arange(s, dtype="int64").unsqueeze(0)
        mask = paddle.triu(paddle.full([s, s], -1e4, "float32"), 1)
        return self.out(self.enc(self.emb(ids) + self.pos(pos), mask))


class CRNN(nn.Layer):
    """Convs, the height pooled away and squeezed, a bidirectional LSTM over the width."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2D((8, 1))  # H 8 -> 1
        self.rnn = nn.LSTM(8, 8, direction="bidirect")
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        f = self.pool(F.relu(self.conv(x))).squeeze(2).transpose([0, 2, 1])
        y, _ = self.rnn(f)
        return self.fc(y)


class ViT(nn.Layer):
    """Patches, a class token expanded to the batch read from the shape, learned positions."""

    def __init__(self, d=16):
        super().__init__()
        self.patch = nn.Conv2D(3, d, 4, stride=4)
        self.cls = self.create_parameter([1, 1, d])
        self.pos = self.create_parameter([1, 17, d])
        self.enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, normalize_before=True, activation="gelu"), 1
        )
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 5)

    def forward(self, x):
        B = paddle.shape(x)[0]
        x = self.patch(x).flatten(2).transpose([0, 2, 1])
        cls = self.cls.expand([B, -1, -1])
        x = paddle.concat([cls, x], axis=1) + self.pos
        x = self.norm(self.enc(x))
        return self.head(x[:, 0])


class OCRHead(nn.Layer):
    """OCRNet's object context: region features gathered by softmax over pixels, pixel-region attention."""

    def __init__(self, c=8, k=3):
        super().__init__()
        self.stem = nn.Conv2D(3, c, 3, stride=2, padding=1)
        self.aux = nn.Conv2D(c, k, 1)
        self.out = nn.Conv2D(2 * c, k, 1)

    def forward(self, x):
        f = F.relu(self.stem(x))
        n, c, h, w = paddle.shape(f)[0], paddle.shape(f)[1], paddle.shape(f)[2], paddle.shape(f)[3]
        probs = F.softmax(self.aux(f).reshape([n, 3, -1]), axis=2)  # N, K, HW
        feats = f.reshape([n, c, -1]).transpose([0, 2, 1])  # N, HW, C
        regions = paddle.matmul(probs, feats)  # N, K, C
        sim = F.softmax(paddle.matmul(feats, regions.transpose([0, 2, 1])), axis=-1)  # N, HW, K
        ctx = paddle.matmul(sim, regions).transpose([0, 2, 1]).reshape([n, c, h, w])
        y = self.out(paddle.concat([f, ctx], axis=1))
        return F.interpolate(y, size=paddle.shape(x)[2:], mode="bilinear", align_corners=True)


class SVTRMix(nn.Layer):
    """SVTR's mixing block: patch tokens, attention, an MLP, back to a map, the height pooled away."""

    def __init__(self, d=16):
        super().__init__()
        self.embed = nn.Conv2D(3, d, (4, 4), stride=(4, 4))
        self.attn = nn.MultiHeadAttention(d, 2)
        self.norm = nn.LayerNorm(d, epsilon=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 32), nn.Hardswish(), nn.Linear(32, d))
        self.pool = nn.AdaptiveAvgPool2D((1, None))
        self.fc = nn.Linear(d, 7)

    def forward(self, x):
        f = self.embed(x)
        h, w = paddle.shape(f)[2], paddle.shape(f)[3]
        t = f.flatten(2).transpose([0, 2, 1])
        t = t + self.attn(self.norm(t))
        t = t + self.mlp(self.norm(t))
        f = t.transpose([0, 2, 1]).reshape([0, 16, h, w])
        f = self.pool(f).squeeze(2).transpose([0, 2, 1])
        return self.fc(f)


class HGNetESE(nn.Layer):
    """PP-HGNet's learnable affine after a conv, and its effective squeeze-excitation."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Conv2D(3, c, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2D(c)
        self.scale = self.create_parameter([1], default_initializer=nn.initializer.Constant(1.0))
        self.bias = self.create_parameter([1], default_initializer=nn.initializer.Constant(0.0))
        self.ese = nn.Conv2D(c, c, 1)

    def forward(self, x):
        y = F.relu(self.bn(self.stem(x))) * self.scale + self.bias
        a = F.sigmoid(self.ese(y.mean(axis=[2, 3], keepdim=True)))
        return F.adaptive_avg_pool2d(y * a, 1).flatten(1)


class Encoder(nn.Layer):
    """An NLP encoder as PaddleNLP's ERNIE and BERT write one: token and position embeddings, a layer
    norm, Transformer layers, and the padding mask ``((ids == pad) * -1e4).unsqueeze([1, 2])``."""

    def __init__(self, vocab: int = 50, width: int = 32, pad: int = 0) -> None:
        super().__init__()
        self.pad = pad
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(64, width)
        self.norm = nn.LayerNorm(width)
        layer = nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 2)

    def forward(self, ids):
        mask = ((ids == self.pad).astype("float32") * -1e4).unsqueeze([1, 2])
        ones = paddle.ones_like(ids)
        x = self.norm(self.tokens(ids) + self.positions(paddle.cumsum(ones, axis=-1) - ones))
        return self.encoder(x, mask)


class Segmenter(nn.Layer):
    """A segmentation network as PaddleSeg's PP-LiteSeg and BiSeNet write one: a strided backbone, a
    context branch resized to a detail branch's size, and logits resized to the input's size, every
    size read from another tensor's shape (``paddle.shape(y)[2:]``)."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.detail = nn.Sequential(nn.Conv2D(3, 8, 3, stride=2, padding=1), nn.ReLU())
        self.context = nn.Sequential(nn.Conv2D(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Conv2D(8, classes, 1)

    def forward(self, x):
        detail = self.detail(x)
        context = F.interpolate(self.context(detail), size=paddle.shape(detail)[2:], mode="bilinear")
        logits = self.head(detail + context)
        return F.interpolate(logits, size=paddle.shape(x)[2:], mode="bilinear", align_corners=False)


class BiSeNetV2Agg(nn.Layer):
    """Detail branch (strided convs), semantic branch (stem + context embedding with global pooling),
    bilateral guided aggregation: sigmoid gates, upsampling to the detail size."""

    def __init__(self):
        super().__init__()
        self.detail = nn.Sequential(
            nn.Conv2D(3, 16, 3, 2, 1), nn.BatchNorm2D(16), nn.ReLU(), nn.Conv2D(16, 16, 3, 2, 1)
        )
        self.semantic = nn.Sequential(
            nn.Conv2D(3, 16, 3, 4, 1), nn.BatchNorm2D(16), nn.ReLU(), nn.Conv2D(16, 16, 3, 2, 1)
        )
        self.ce = nn.Conv2D(16, 16, 1)
        self.gate = nn.Conv2D(16, 16, 3, 1, 1, groups=16)
        self.head = nn.Conv2D(16, 4, 1)

    def forward(self, x):
        d = self.detail(x)
        s = self.semantic(x)
        s = s + self.ce(F.adaptive_avg_pool2d(s, 1))
        s_up = F.interpolate(s, size=paddle.shape(d)[2:], mode="bilinear", align_corners=False)
        agg = d * F.sigmoid(self.gate(s_up)) + s_up * F.sigmoid(self.gate(d))
        return F.interpolate(self.head(agg), size=paddle.shape(x)[2:], mode="bilinear", align_corners=False)


class PicoDetGFL(nn.Layer):
    """A GFL head: box sides as distributions over bins, integrated by a softmax and a product with
    the bin positions; scores with sigmoid; grid centres from the feature size."""

    def __init__(self, bins=8):
        super().__init__()
        self.bins = bins
        self.stem = nn.Conv2D(3, 16, 3, 8, 1)
        self.cls = nn.Conv2D(16, 3, 1)
        self.reg = nn.Conv2D(16, 4 * (bins + 1), 1)
        self.register_buffer("proj", paddle.linspace(0, bins, bins + 1))

    def forward(self, x):
        f = F.relu(self.stem(x))
        b = paddle.shape(f)[0]
        scores = F.sigmoid(self.cls(f)).flatten(2).transpose([0, 2, 1])
        reg = self.reg(f).flatten(2).transpose([0, 2, 1]).reshape([b, -1, 4, self.bins + 1])
        dist = F.softmax(reg, axis=-1).matmul(self.proj.reshape([-1, 1])).squeeze(-1) * 8.0
        h, w = paddle.shape(f)[2], paddle.shape(f)[3]
        ys, xs = paddle.meshgrid(
            paddle.arange(h, dtype="float32") * 8 + 4, paddle.arange(w, dtype="float32") * 8 + 4
        )
        centers = paddle.stack([xs, ys, xs, ys], axis=-1).reshape([1, -1, 4])
        signs = paddle.to_tensor([-1.0, -1.0, 1.0, 1.0])
        return scores, centers + dist * signs


class DBHead(nn.Layer):
    """PaddleOCR's DB head: conv, two transposed convs up by 4, sigmoid probability and threshold maps,
    the differentiable binarization 1 / (1 + exp(-k (P - T)))."""

    def __init__(self, c=16, k=50):
        super().__init__()
        self.k = k
        self.backbone = nn.Sequential(nn.Conv2D(3, c, 3, 4, 1), nn.ReLU())

        def branch():
            return nn.Sequential(
                nn.Conv2D(c, c // 4, 3, padding=1, bias_attr=False),
                nn.BatchNorm2D(c // 4),
                nn.ReLU(),
                nn.Conv2DTranspose(c // 4, c // 4, 2, 2),
                nn.BatchNorm2D(c // 4),
                nn.ReLU(),
                nn.Conv2DTranspose(c // 4, 1, 2, 2),
            )

        self.prob, self.thresh = branch(), branch()

    def forward(self, x):
        f = self.backbone(x)
        p, t = F.sigmoid(self.prob(f)), F.sigmoid(self.thresh(f))
        return paddle.concat([p, t, 1 / (1 + paddle.exp(-self.k * (p - t)))], axis=1)


class UIE(nn.Layer):
    """UIE: an ERNIE-style encoder with token type and position embeddings, pointer heads for span
    start and end with sigmoid probabilities."""

    def __init__(self, vocab=60, d=32):
        super().__init__()
        self.word, self.pos, self.kind = nn.Embedding(vocab, d), nn.Embedding(64, d), nn.Embedding(2, d)
        self.norm = nn.LayerNorm(d)
        self.enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, activation="gelu"), 2
        )
        self.start, self.end = nn.Linear(d, 1), nn.Linear(d, 1)

    def forward(self, ids, types):
        pos = paddle.arange(paddle.shape(ids)[1], dtype="int64").unsqueeze(0).expand_as(ids)
        mask = paddle.unsqueeze((ids == 0).astype("float32") * -1e4, axis=[1, 2])
        x = self.norm(self.word(ids) + self.pos(pos) + self.kind(types))
        h = self.enc(x, mask)
        return F.sigmoid(self.start(h).squeeze(-1)), F.sigmoid(self.end(h).squeeze(-1))


class Tagger(nn.Layer):
    """LAC (PaddleNLP's lexical analysis): word embeddings, two bidirectional GRU layers run to each
    sentence's length, emissions per tag and a CRF's Viterbi decoding with start and stop tags."""

    def __init__(self, vocab=50, d=16, hidden=12, tags=7):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, hidden, num_layers=2, direction="bidirect")
        self.emission = nn.Linear(2 * hidden, tags)
        self.transitions = self.create_parameter([tags, tags])
        self.decode = paddle.text.ViterbiDecoder(self.transitions, include_bos_eos_tag=True)

    def forward(self, ids, lengths):
        h, _ = self.gru(self.word(ids), sequence_length=lengths)
        return self.decode(self.emission(h), lengths)


class Architecture(NamedTuple):
    """A network, its inputs as the zoo exports them (None: a dynamic dim), their dtype, the shapes of
    two calls (every input of a call has the call's shape), and for integer inputs each one's bound."""

    layer: type[nn.Layer]
    inputs: tuple[list[int | None], ...]
    dtype: str
    calls: tuple[tuple[int, ...], tuple[int, ...]]
    vocab: tuple[int, ...] = ()


IMAGE = [None, 3, None, None]
ZOO = {
    "convnext": Architecture(ConvNeXtBlock, (IMAGE,), "float32", ((2, 3, 32, 32), (1, 3, 48, 16))),
    "swin": Architecture(SwinBlock, ([None, 3, 16, 16],), "float32", ((2, 3, 16, 16), (3, 3, 16, 16))),
    "unet": Architecture(UNet, (IMAGE,), "float32", ((2, 3, 16, 16), (1, 3, 8, 24))),
    "deeplab": Architecture(DeepLabASPP, (IMAGE,), "float32", ((2, 3, 16, 16), (1, 3, 20, 12))),
    "yolo": Architecture(YoloHead, (IMAGE,), "float32", ((2, 3, 32, 32), (1, 3, 16, 24))),
    "gpt": Architecture(GPT, ([None, None],), "int64", ((2, 8), (1, 5)), (40,)),
    "crnn": Architecture(CRNN, ([None, 3, 8, None],), "float32", ((2, 3, 8, 16), (1, 3, 8, 10))),
    "vit": Architecture(ViT, ([None, 3, 16, 16],), "float32", ((2, 3, 16, 16), (3, 3, 16, 16))),
    "ocrnet": Architecture(OCRHead, (IMAGE,), "float32", ((2, 3, 16, 16), (1, 3, 12, 20))),
    "svtr": Architecture(SVTRMix, ([None, 3, 8, None],), "float32", ((2, 3, 8, 32), (1, 3, 8, 16))),
    "hgnet": Architecture(HGNetESE, (IMAGE,), "float32", ((2, 3, 16, 16), (1, 3, 12, 20))),
    # written after the mechanism was (held out): DB needed full_batch_size_like, UIE expand_as
    "bisenetv2": Architecture(BiSeNetV2Agg, (IMAGE,), "float32", ((2, 3, 64, 64), (1, 3, 32, 48))),
    "picodet": Architecture(PicoDetGFL, (IMAGE,), "float32", ((2, 3, 32, 32), (1, 3, 24, 40))),
    "db": Architecture(DBHead, (IMAGE,), "float32", ((2, 3, 32, 32), (1, 3, 16, 48))),
    "uie": Architecture(UIE, ([None, None], [None, None]), "int64", ((2, 12), (3, 7)), (60, 2)),
}

# Paddle Inference's predictor fails on its own saved program here (PreconditionNotMetError: "The meta
# data must be valid when call the mutable data function"): compared with the layer run by Paddle
INFERENCE_FAILS = {"svtr"}
