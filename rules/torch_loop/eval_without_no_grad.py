"""LL703 eval-without-no-grad: the rule, its documentation and its examples."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import libcst as cst

from lintloop.analysis.iteration import loop_header
from lintloop.analysis.loop_values import FEW_ITERATIONS
from lintloop.analysis.pytorch import NO_GRAD_CALLS
from lintloop.analysis.nodes import call_name, dotted, names_in, positional_args, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Contexts and decorators under which autograd records nothing (or, for `set_grad_enabled(cond)`,
# records only when the code says so).
_GRAD_OFF = NO_GRAD_CALLS | {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
# Gradients taken without `backward()`; under `no_grad` they raise (nothing requires grad).
_DIFFERENTIATING = {"torch.autograd.grad", *(f"torch.autograd.functional.{name}"
                                             for name in ("jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"))}
# Adversarial-attack libraries: an attack takes the gradient of the model's loss with respect to its input.
_ATTACK_LIBRARIES = ("advertorch.", "torchattacks.", "foolbox.", "art.attacks.", "cleverhans.")

# Decorators known not to change autograd's mode.
_PLAIN_DECORATORS = {"staticmethod", "classmethod", "property", "functools.wraps", "functools.cache",
                     "functools.lru_cache", "abc.abstractmethod", "typing.override", "torch.compile",
                     "torch.jit.script", "torch.jit.unused", "torch.jit.ignore", "contextlib.contextmanager"}


# Methods that keep what they are given beyond the iteration: a list, a set, a queue, a metric's state.
_KEEPING_METHODS = {"append", "extend", "insert", "appendleft", "add", "update", "put", "setdefault"}
# Tensor methods whose result holds no autograd graph.
_GRAPH_FREE_METHODS = {"item", "tolist", "numpy", "detach", "argmax", "argmin"}


def _chain(value: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """`value`, then each value a chain of methods, attributes and indexing is computed from, down to where
    it starts (`pred[0].cpu()`, `pred[0]`, `pred`)."""
    while True:
        yield value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            value = value.func.value
        elif isinstance(value, (cst.Attribute, cst.Subscript)):
            value = value.value
        else:
            return


def _drops_graph(step: cst.BaseExpression) -> bool:
    """A step of a chain whose result holds no graph: `.item()`, `.detach()`, `.data`, a comparison
    (booleans take no gradient)."""
    return isinstance(step, cst.Comparison) or isinstance(step, cst.Attribute) and step.attr.value == "data" or (
        isinstance(step, cst.Call) and isinstance(step.func, cst.Attribute) and step.func.attr.value in _GRAPH_FREE_METHODS)


def _graph_free(value: cst.BaseExpression) -> bool:
    """A value that holds no graph, whatever it is computed from: a chain with a step that drops the graph
    (`out.argmax(1).item()`, `logits.detach().cpu()`, `out.data.max(1)[1]`, `(out.argmax(1) == y).sum()`)."""
    return any(map(_drops_graph, _chain(value)))


def _stores_beyond(target: cst.BaseExpression, read: set[str]) -> bool:
    """Does assigning to `target` keep the value past the iteration: an item or attribute
    (`preds[i] = out`, `self.last = out`), or a name the value reads (`outs = torch.cat([outs, out])`,
    `x = model(x)`)?"""
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_stores_beyond(e.value, read) for e in target.elements)
    if isinstance(target, cst.StarredElement):
        return _stores_beyond(target.value, read)
    return isinstance(target, (cst.Subscript, cst.Attribute)) or isinstance(target, cst.Name) and target.value in read


class EvalWithoutNoGrad(Rule):
    code = "LL703"
    name = "eval-without-no-grad"
    description = "a model called after `eval()` without `no_grad`"
    frameworks = ("pt",)
    kind = "perf"
    needs = Needs(file=(("call:eval",),),
                  statement=(("loop", "calls_loop"), ("call:eval", "name:eval"), ("runs_evaluated",)))
    probe = "mem"
    summary = ("A loop after `model.eval()` calls the model (or a submodule of it the file shows, "
               "`model.decoder(x)`) without `torch.no_grad()` / `torch.inference_mode()` "
               "(as a context or a decorator) and without any backward: autograd records the graph of every "
               "evaluation forward pass for nothing. Reported when the loop runs over a loader, a dataset or "
               "anything of unknown length, or keeps its outputs across iterations (appended, accumulated, fed "
               "back); a few calls over a small literal range or list whose output is rebound each iteration, "
               "and calls on a batch of one sample (`obs.unsqueeze(0)`, `x[None]`, `torch.tensor([[x, y]])`: "
               "an RL acting loop, a sampling grid) whose output is rebound or only fed back as the recurrent state "
               "(`out, hidden = rnn(token, hidden)`: a sampling loop), hold one small graph at a time and are not "
               "reported. Outputs kept only through a step that drops the graph (`.item()`, `.detach()`, `.data`, a "
               "comparison, arithmetic or a plain function given only such values) are not kept graphs. An input made "
               "`Variable(x, volatile=True)` turned recording off in PyTorch 0.3: in code written for it (no "
               "`.item()`, which 0.4 brought, in the function around the loop) it is not reported; elsewhere the message says that the flag has done "
               "nothing since 0.4. A loop that takes gradients (`torch.autograd.grad`, an attack of an adversarial-"
               "attack library: advertorch, torchattacks, foolbox, ART, cleverhans) needs autograd on and is not "
               "reported. The message says which.")
    why = ("`eval()` only changes dropout and batch norm; it does not turn autograd off. Every forward pass still "
           "saves its activations for a backward that never comes: more memory and time per batch, and every "
           "output kept (predictions collected for a metric) keeps its whole graph alive.")
    symptom = ("LL703_bad.py: the evaluation loop's outputs carry `grad_fn`, and collecting them "
               "grows memory by the activations of every batch (measured in torch 2.13: about 6.5 MiB per batch for "
               "a small MLP); with `torch.no_grad()` the same loop holds only the outputs.")
    remedy = "Wrap evaluation in `with torch.no_grad():` (or `torch.inference_mode()`), or decorate the evaluation function with `@torch.no_grad()`."
    flagged = (
        Example("""
import torch
from torch import nn
class Seq2Seq(nn.Module):
    def __init__(self, vocab_size, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)
def translate(net, src, max_len):
    net.eval()
    _, state = net.encoder(net.embed(src))
    token, outputs = src[:, -1:], []
    for _ in range(max_len):
        hidden, state = net.decoder(net.embed(token), state)
        token = net.out(hidden).argmax(dim=-1)
        outputs.append(hidden)
    return torch.cat(outputs, dim=1)
model = Seq2Seq(10000)
for src in test_loader:
    print(translate(model, src, 40).shape)
""", expect="""
15:25-15:61 `net.decoder(net.embed(token), state)` runs after `net.eval()` with autograd on
    help: wrap `for _ in range(max_len)` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: the loop runs it 40 times: every iteration records a graph and keeps its activations for a
        backward that never comes
"""),
        Example("""
import torch
def predict(net, loader):
    return [net(x).argmax(1) for x in loader] + [net(x) for x in loader]

def score(net, loader):
    total = 0.0
    for x, y in loader:
        total += criterion(net(x), y).item()
    return total

model.eval()
for loader in (val_loader, test_loader):
    print(score(model, loader))
""", expect="""
8:28-8:34 `net(x)` runs after `model.eval()` with autograd on
    help: wrap `for x, y in loader` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: the loop runs it once for every item of `loader`, of unknown length: every iteration records a
        graph and keeps its activations for a backward that never comes
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct
""", expect="""
6:21-6:29 `model(x)` runs after `model.eval()` with autograd on
    help: wrap `for x, y in loader` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: the loop runs it once for every item of `loader`, of unknown length: every iteration records a
        graph and keeps its activations for a backward that never comes
"""),
        Example("""
import torch
model.eval()
preds = []
for batch in test_loader:
    logits = model(batch["input_ids"])
    preds.append(logits.argmax(-1))
""", expect="""
5:14-5:39 `model(batch["input_ids"])` runs after `model.eval()` with autograd on
    help: wrap `for batch in test_loader` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: the loop runs it once for every item of `test_loader`, of unknown length: every iteration
        records a graph and keeps its activations for a backward that never comes
"""),
        Example("""
import torch
class Evaluator:
    def run(self):
        self.model.eval()
        total = 0.0
        for x, y in self.loader:
            total += self.criterion(self.model(x), y).item()
        return total
""", expect="""
7:37-7:50 `self.model(x)` runs after `self.model.eval()` with autograd on
    help: wrap `for x, y in self.loader` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: the loop runs it once for every item of `self.loader`, of unknown length: every iteration
        records a graph and keeps its activations for a backward that never comes
"""),
        Example("""
import torch
from torch import nn
class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 64), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(64, 784), nn.Sigmoid())
    def forward(self, x):
        return self.decoder(self.encoder(x))
net = AutoEncoder()
net.eval()
samples = []
for z in latents:
    samples.append(net.decoder(z))
""", expect="""
14:20-14:34 `net.decoder(z)` runs after `net.eval()` with autograd on
    help: wrap `for z in latents` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: `samples.append(net.decoder(z))` keeps its output across iterations: the graph and activations
        of every iteration stay alive
"""),
        Example("""
import torch
classifier.eval()
probabilities = []
for sample in (cat_image, dog_image, bird_image):
    probabilities.append(torch.softmax(classifier(sample), dim=-1))
""", expect="""
5:40-5:58 `classifier(sample)` runs after `classifier.eval()` with autograd on
    help: wrap `for sample in (cat_image, dog_image, bird_image)` in `with torch.no_grad():` (or
        `torch.inference_mode()`)
    note: `probabilities.append(torch.softmax(classifier(sam…` keeps its output across iterations: the
        graph and activations of every iteration stay alive
"""),
        Example("""
import torch
generator.eval()
frame = seed_frame
for _ in range(8):
    frame = generator(frame)
    show(frame)
""", expect="""
5:13-5:29 `generator(frame)` runs after `generator.eval()` with autograd on
    help: wrap `for _ in range(8)` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: `frame = generator(frame)` keeps its output across iterations: the graph and activations of
        every iteration stay alive
"""),
        Example("""
import torch
from torch.autograd import Variable
def validate(net, loader):
    net.eval()
    hits = 0
    for images, labels in loader:
        images = Variable(images.cuda(), volatile=True)
        hits += (net(images).max(1)[1].cpu() == labels).sum().item()
    return hits
""", expect="""
8:18-8:29 `net(images)` runs after `net.eval()` with autograd on
    help: wrap `for images, labels in loader` in `with torch.no_grad():` (or `torch.inference_mode()`)
    note: the loop runs it once for every item of `loader`, of unknown length: every iteration records a
        graph and keeps its activations for a backward that never comes; `volatile=True` has turned
        nothing off since PyTorch 0.4
"""),
        Example("""
import torch
def save_overlays(model, dataset):
    model.eval()
    overlays = []
    for scan_id in sorted(dataset.scan_ids)[:10]:
        for depth in range(5):
            image_t, mask_t = dataset.slice(scan_id, depth)
            pred_g = model(image_t.unsqueeze(0))[0]
            overlays.append(pred_g * 0.5 + mask_t * 0.5)
    return overlays
""", expect="""
8:22-8:49 `model(image_t.unsqueeze(0))` runs after `model.eval()` with autograd on
    help: wrap `for scan_id in sorted(dataset.scan_ids)[:10]` in `with torch.no_grad():` (or
        `torch.inference_mode()`)
    note: `overlays.append(pred_g * 0.5 + mask_t * 0.5)` keeps its output across iterations: the graph
        and activations of every iteration stay alive
"""),
    )
    not_flagged = (
        Example("""
import torch
from torchattacks import PGD
def robust_accuracy(model, loader):
    model.eval()
    attack = PGD(model, eps=8 / 255)
    correct = 0
    for x, y in loader:
        x_adv = attack(x, y)
        correct += (model(x_adv).argmax(1) == y).sum().item()
    return correct
"""),
        Example("""
import torch
import torchattacks as ta
class RobustEval:
    def __init__(self, model):
        self.model = model
        self.attack = ta.FGSM(model, eps=0.03)
    def run(self, loader):
        self.model.eval()
        fooled = 0
        for x, y in loader:
            fooled += (self.model(self.attack(x, y)).argmax(1) != y).sum().item()
        return fooled
"""),
        Example("""
from advertorch.attacks import LinfPGDAttack
def evaluate_attack(model, loader, adversary):
    model.eval()
    hits = 0
    for x, y in loader:
        hits += (model(adversary.perturb(x, y)).argmax(1) == y).sum().item()
    return hits
adversary = LinfPGDAttack(net, eps=0.03, nb_iter=10)
print(evaluate_attack(net, test_loader, adversary))
"""),
        Example("""
import numpy as np
import torch
def save_overlays(model, dataset, writer):
    model.eval()
    for scan_id in sorted(dataset.scan_ids)[:10]:
        for depth in range(5):
            image_t, mask_t = dataset.slice(scan_id, depth)
            pred_a = model(image_t.unsqueeze(0))[0].detach().cpu().numpy() > 0.5
            mask_a = mask_t.numpy() > 0.5
            overlay = np.zeros((256, 256, 3), dtype=np.float32)
            overlay[:, :, 0] += pred_a & (1 - mask_a)
            overlay[:, :, 1] += pred_a & mask_a
            writer.add_image(f"{scan_id}/{depth}", overlay, dataformats="HWC")
"""),
        Example("""
import torch
from torch.autograd import Variable
def validate(net, loader):
    net.eval()
    total = 0.0
    for images, labels in loader:
        images = Variable(images.cuda(), volatile=True)
        labels = Variable(labels.cuda(), volatile=True)
        total += criterion(net(images), labels).data[0]
    return total / len(loader)
"""),
        Example("""
import torch
from torch.autograd import Variable
def sample(rnn, prime_ids, length):
    rnn.eval()
    prime = Variable(torch.LongTensor(prime_ids)[None])
    _, state = rnn(prime)
    token = prime[:, -1][:, None]
    text = list(prime_ids)
    for _ in range(length):
        logits, state = rnn(token, state)
        choice = pick_top_k(logits.data)
        text.append(choice[0])
        token = Variable(torch.LongTensor(choice))[None]
    return text
"""),
        Example("""
import torch
import torch.nn.functional as F
def pgd(model, x, y, eps=8 / 255, alpha=2 / 255, steps=10):
    delta = torch.zeros_like(x, requires_grad=True)
    for _ in range(steps):
        loss = F.cross_entropy(model(x + delta), y)
        grad, = torch.autograd.grad(loss, delta)
        delta = (delta + alpha * grad.sign()).clamp(-eps, eps).detach().requires_grad_()
    return delta
model.eval()
correct = 0
for x, y in test_loader:
    delta = pgd(model, x, y)
    correct += (model(x + delta).argmax(1) == y).sum().item()
"""),
        Example("""
import torch
model.eval()
for images, labels in test_loader:
    outputs = model(images)
    print(outputs.argmax(1)[:8], labels[:8])
    break
"""),
        Example("""
import numpy as np
import torch
def generate(rnn, prime_id, predict_len=100):
    rnn.eval()
    current_seq = np.full((1, sequence_length), pad_value)
    current_seq[-1][-1] = prime_id
    words = []
    for _ in range(predict_len):
        current_seq = torch.LongTensor(current_seq)
        hidden = rnn.init_hidden(current_seq.size(0))
        output, _ = rnn(current_seq, hidden)
        p = torch.softmax(output, dim=1).data
        word = int(p.argmax())
        words.append(word)
        current_seq = np.roll(current_seq.numpy(), -1, 1)
        current_seq[-1][-1] = word
    return words
"""),
        Example("""
import torch as t
def gen(model, start_words, max_len=100):
    model.eval()
    res = [START] + [word2ix[w] for w in start_words]
    for _ in range(max_len):
        src = t.tensor(res).to(device)[:, None]
        memory, logits = model(src)
        next_word = logits[-1, 0].argmax().item()
        if next_word == EOP:
            break
        res.append(next_word)
    return res
"""),
        Example("""
import gymnasium as gym
import torch
from torch import nn
policy = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
policy.load_state_dict(torch.load("policy.pt"))
policy.eval()
env = gym.make("CartPole-v1")
obs, _ = env.reset()
done, episode_return = False, 0.0
while not done:
    state = torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0)
    action = policy(state).argmax(dim=1).item()
    obs, reward, terminated, truncated, _ = env.step(action)
    done = terminated or truncated
    episode_return += reward
print(episode_return)
"""),
        Example("""
import numpy as np
import torch
decoder.eval()
figure = np.zeros((28 * 15, 28 * 15))
for i, y in enumerate(np.linspace(-3, 3, 15)):
    for j, x in enumerate(np.linspace(-3, 3, 15)):
        z = torch.tensor([[x, y]], dtype=torch.float32)
        digit = decoder(z).view(28, 28).detach().numpy()
        figure[i * 28:(i + 1) * 28, j * 28:(j + 1) * 28] = digit
"""),
        Example("""
import torch
classifier.eval()
shown = 6
for i in range(shown):
    image, label = test_set[i]
    scores = classifier(image.unsqueeze(0))
    draw(image, title=f"{label}: {scores.argmax(dim=1).item()}")
"""),
        Example("""
import torch
from torch import nn
class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 64), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(64, 784), nn.Sigmoid())
    def forward(self, x):
        return self.decoder(self.encoder(x))
    def sample_count(self):
        return 16
net = AutoEncoder()
net.eval()
for name, param in net.named_parameters():
    print(name, net.sample_count(), param.shape)
"""),
        Example("""
import torch
def score(net, loader):
    return sum(criterion(net(x), y).item() for x, y in loader)

def score_loop(net, loader):
    net.train()
    for x, y in loader:
        net(x)

model.eval()
with torch.no_grad():
    print(score(model, val_loader))
model.train()
for x, y in loader:
    print(score_loop(model, loader))
"""),
        Example("""
import torch
@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    return [model(x) for x, _ in loader]

def evaluate_loop(model, loader):
    model.eval()
    with torch.inference_mode():
        for x, y in loader:
            model(x)
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    for x, y in loader:
        x.requires_grad_(True)
        loss = criterion(model(x), y)
        loss.backward()
        adversarial.append(x.grad.sign())
"""),
        Example("""
import torch
def evaluate(model, loader):
    model.eval()
    for x, y in loader:
        yield model(x)

with torch.no_grad():
    for out in evaluate(net, val_loader):
        pass
"""),
        Example("""
import torch
model.eval()
model.train()
for x, y in loader:
    out = model(x)
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if call_name(node) != "eval" or node.args or receiver(node) is None:
            return
        model = dotted(receiver(node))
        scope = self.ctx.scope_of(node)
        if model is None or self._grad_off(node) or (
                isinstance(scope, cst.FunctionDef) and self._only_called_without_grad(scope)):
            return
        for loop, inner, reached in self._loops_after(node, model, scope):
            if self._switched_back(model, node, reached) or self.ctx.iteration.of(loop).of("backward") \
                    or self._differentiates(loop, inner):
                return
            forward = next((c for c, name in self._calls_per_iteration(loop, inner) if self._runs(c, name)
                            and not self._grad_off(c)), None)
            if forward is None or id(loop) in self._reported:
                continue
            kept_all = list(self._kept_outputs(loop, inner))
            kept = kept_all[0] if kept_all else None
            count = self.ctx.iteration.count(loop)
            runs = self._runs_per_pass(loop, forward)
            if kept is None and count is not None and (runs is None or runs <= FEW_ITERATIONS):
                # A few forwards, each graph dropped when its output is rebound: bounded and small. (A
                # loop inside it whose length is unknown is reported on its own.)
                continue
            if all(self._carried_state(sink, forward) for sink in kept_all) and any(
                    self.ctx.torch.batch_of_one(arg, forward) for arg in positional_args(forward)):
                # One sample per forward (an RL acting loop's observation, a sampling loop's token), its graph
                # dropped when the output is rebound, or chained only through the recurrent state it feeds
                # back: a few small tensors a step.
                continue
            volatile = any(self.ctx.torch.volatile_input(arg, forward) for arg in positional_args(forward))
            if volatile and not self._calls_item(loop):
                # PyTorch 0.3 code (no `.item()`, which 0.4 brought): its volatile input records no graph.
                continue
            self._reported.add(id(loop))
            header = loop_header(self.ctx, loop)
            if kept is not None:
                note = (f"`{self.ctx.snippet(kept, 50)}` keeps its output across iterations: the graph and "
                          "activations of every iteration stay alive")
            elif count is None:
                note = (f"the loop runs it once for every item of `{self.ctx.snippet(loop.iter, 40)}`, of unknown length"
                          if isinstance(loop, cst.For) else "the loop, of unknown length, runs it on every pass")
                note += ": every iteration records a graph and keeps its activations for a backward that never comes"
            else:
                note = (f"the loop runs it {runs} times: every iteration records a graph and keeps its "
                          "activations for a backward that never comes")
            if volatile:
                note += "; `volatile=True` has turned nothing off since PyTorch 0.4"
            self.report(forward, f"`{self.ctx.snippet(forward, 36)}` runs after `{self.ctx.snippet(node, 25)}` with "
                                 "autograd on",
                        help=f"wrap `{header}` in `with torch.no_grad():` (or `torch.inference_mode()`)",
                        note=note)
            return

    def _loops_after(self, evaluation: cst.Call, model: str, scope: cst.CSTNode
                     ) -> Iterator[tuple[cst.For | cst.While, str, cst.CSTNode]]:
        """The loops that run after `evaluation` (`model.eval()`), each with the model's name there and
        what runs it in the scope of the `eval()`: those of its scope, in order (the loop itself), then
        those of a function of this file called after it with the model as an argument
        (`evaluate(model, loader)`: its parameter's name, and the call)."""
        yield from ((loop, model, loop) for loop in self.ctx.nodes_in_scope((cst.For, cst.While), scope).after(evaluation))
        for call in self.ctx.nodes_in_scope(cst.Call, scope).after(evaluation):
            for fn in self.ctx.calls.targets(call):
                for param in [*fn.params.posonly_params, *fn.params.params]:
                    passed = self.ctx.definitions.argument_for(call, fn, param)
                    inner = param.name.value
                    if passed is None or dotted(passed) != model or self._grad_off(call) or any(
                            dotted(receiver(c)) == inner for c in self.ctx.definitions.named("train").within(fn)
                            if receiver(c) is not None):
                        continue  # not given the model, or run without grad, or switches it back itself
                    yield from ((loop, inner, call) for loop in self.ctx.nodes_in_scope((cst.For, cst.While), fn).nodes)

    def _differentiates(self, loop: cst.For | cst.While, model: str) -> bool:
        """Does an iteration take gradients without `backward()`: `torch.autograd.grad` (an adversarial
        evaluation's attack, a gradient penalty), `torch.autograd.functional.jacobian`, or an attack of an
        adversarial-attack library (`adversary.perturb(x, y)` with `adversary = LinfPGDAttack(model)`)?
        They need autograd on."""
        return any(self._takes_gradients(call) for call, _ in self._calls_per_iteration(loop, model))

    def _takes_gradients(self, call: cst.Call) -> bool:
        callee = self.ctx.names.callee(call) or ""
        if callee in _DIFFERENTIATING or callee.startswith(_ATTACK_LIBRARIES):
            return True
        if not self._imports_an_attack_library:
            return False  # no attack object can be made here: callees resolve through the file's imports
        # The attack called (`atk(x, y)`, `self.attack(x, y)`), or the one whose method is (`adversary.perturb(x, y)`).
        attacks = [call.func, call.func.value] if isinstance(call.func, cst.Attribute) else [call.func]
        return any((made := self.ctx.flow.constructed_by(attack, call)) is not None
                   and made[1].startswith(_ATTACK_LIBRARIES) for attack in attacks)

    @cached_property
    def _imports_an_attack_library(self) -> bool:
        return any(f"{q}.".startswith(_ATTACK_LIBRARIES) for q in self.ctx.names.imports.values())

    def _calls_per_iteration(self, loop: cst.For | cst.While, model: str) -> Iterator[tuple[cst.Call, str]]:
        """The calls an iteration of `loop` makes, each with the model's name where it is: those of the
        loop's body, then those of a function of this file the body calls (`step(model, batch)`), where
        the model is its parameter's name or the name it reads from around it."""
        calls = list(self.ctx.definitions.calls_in(loop))
        yield from ((c, model) for c in calls)
        for call in calls:
            for fn in self.ctx.calls.targets(call):
                params = [*fn.params.posonly_params, *fn.params.params]
                passed = next((p.name.value for p in params
                               if (given := self.ctx.definitions.argument_for(call, fn, p)) is not None and dotted(given) == model),
                              None)
                name = passed or (model if model not in {p.name.value for p in params} else None)
                if name is not None and not self._grad_off(call):
                    yield from ((c, name) for c in self.ctx.definitions.calls_in(fn))

    def _runs_per_pass(self, loop: cst.For | cst.While, forward: cst.Call) -> int | None:
        """How many times one pass over `loop` runs `forward` (through the loops between them), where
        the file says."""
        runs = 1
        for outer in (loop, *(a for a in self.ctx.ancestors(forward) if isinstance(a, (cst.For, cst.While))
                              and self.ctx.is_inside(a, loop) and a is not loop)):
            count = self.ctx.iteration.count(outer)
            if count is None:
                return None
            runs *= count
        return runs

    def _kept_outputs(self, loop: cst.For | cst.While, model: str) -> Iterator[cst.CSTNode]:
        """Where an iteration keeps an output of the model beyond itself, with its graph: appended,
        accumulated (`total += out`, `outs = torch.cat([outs, out])`), stored in a container or an
        attribute, yielded, or fed back into the next iteration's input (`x = model(x)`)."""
        outputs = [c for c in self.ctx.definitions.calls_in(loop) if self._runs(c, model)]
        for sink, value in self._sinks(loop):
            if not self._holds_no_graph(value, sink) and any(self.ctx.flow.flows_into(out, value, sink)
                                                            for out in outputs):
                yield sink

    def _calls_item(self, loop: cst.For | cst.While) -> bool:
        """Does the function around `loop` (the loop itself at module level) call `.item()`? Asked of the
        code parsed with the loop, not of the whole file: the screen parses only the units a rule needs."""
        scope = self.ctx.scope_of(loop)
        return bool(self.ctx.definitions.named("item").within(scope if isinstance(scope, cst.FunctionDef) else loop))

    @staticmethod
    def _carried_state(sink: cst.CSTNode, forward: cst.Call) -> bool:
        """Is `sink` the forward's own result bound to names the forward reads back, a recurrent state
        (`out, hidden = rnn(token, hidden)`)?"""
        if not (isinstance(sink, cst.Assign) and sink.value is forward):
            return False
        bound = {name for t in sink.targets for name in names_in(t.target)}
        return any(bound & names_in(arg.value) for arg in forward.args)

    def _holds_no_graph(self, value: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """`_graph_free`, also through names (`digit = decoder(z).detach().numpy()`, then `grid[i] = digit`),
        arithmetic and plain functions given only such values (`pred = pick_top_n(out.data)`, then
        `text.append(pred[0])`), and number literals."""
        if _graph_free(value):
            return True
        if depth > 3:
            return False
        if isinstance(value, (cst.Integer, cst.Float)):
            return True
        if isinstance(value, cst.BinaryOperation):  # `pred_a & (1 - label_a)`: of graph-free operands
            return all(self._holds_no_graph(v, at, depth + 1) for v in (value.left, value.right))
        if isinstance(value, cst.UnaryOperation):
            return self._holds_no_graph(value.expression, at, depth + 1)
        *_, base = _chain(value)
        if isinstance(base, cst.Name):
            held = self.ctx.flow.value_at(base.value, at)
            return held is not None and self._holds_no_graph(held[0], held[1], depth + 1)
        return isinstance(base, cst.Call) and isinstance(base.func, cst.Name) and bool(base.args) and all(
            self._holds_no_graph(arg.value, at, depth + 1) for arg in base.args)

    def _sinks(self, loop: cst.For | cst.While) -> Iterator[tuple[cst.CSTNode, cst.BaseExpression]]:
        """(statement or call, value) for each value an iteration of `loop` stores beyond itself."""
        ctx = self.ctx
        for call in ctx.definitions.calls_in(loop):
            if call_name(call) in _KEEPING_METHODS and receiver(call) is not None:
                yield from ((call, arg.value) for arg in call.args)
        for aug in ctx.nodes_within(cst.AugAssign, loop):
            yield aug, aug.value
        for assign in ctx.nodes_within(cst.Assign, loop):
            read = names_in(assign.value)
            if any(_stores_beyond(t.target, read) for t in assign.targets):
                yield assign, assign.value
        for produced in ctx.nodes_within(cst.Yield, loop):
            if isinstance(produced.value, cst.BaseExpression):
                yield produced, produced.value

    def _runs(self, call: cst.Call, model: str) -> bool:
        """`call` runs the model (`model(x)`) or a submodule of it (`model.decoder(x)`, where the file shows
        `decoder` is a module: eval mode reached it too)."""
        func = call.func
        if dotted(func) == model:
            return True
        return isinstance(func, cst.Attribute) and dotted(func.value) == model and \
            self.ctx.modules.value(func, call) is not None

    def _grad_off(self, node: cst.CSTNode) -> bool:
        """Under a no_grad-like `with`, or in a function decorated with one."""
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, cst.With) and any(self._turns_grad_off(item.item) for item in ancestor.items):
                return True
            if isinstance(ancestor, cst.FunctionDef) and any(self._may_turn_grad_off(d.decorator)
                                                             for d in ancestor.decorators):
                return True
        return False

    def _turns_grad_off(self, expr: cst.BaseExpression) -> bool:
        target = expr.func if isinstance(expr, cst.Call) else expr
        return self.ctx.names.qualname(target) in _GRAD_OFF

    def _may_turn_grad_off(self, decorator: cst.BaseExpression) -> bool:
        """A grad-off decorator, or one this file cannot see into (a project's `@smart_inference_mode()`)."""
        target = decorator.func if isinstance(decorator, cst.Call) else decorator
        return self._turns_grad_off(decorator) or (self.ctx.names.qualname(target) or dotted(target) or "") \
            not in _PLAIN_DECORATORS

    def _only_called_without_grad(self, fn: cst.FunctionDef) -> bool:
        sites = self.ctx.calls.call_sites.get(fn, [])
        return bool(sites) and all(self._grad_off(site) or self._consumed_without_grad(site) for site in sites)

    def _consumed_without_grad(self, site: cst.Call) -> bool:
        """A generator's call whose loop runs under no_grad: `with no_grad(): for out in evaluate(...)`."""
        loop = self.ctx.parents.get(site)
        return isinstance(loop, cst.For) and loop.iter is site and self._grad_off(loop)

    def _switched_back(self, model: str, evaluation: cst.Call, reached: cst.CSTNode) -> bool:
        """`model.train()` between the `eval()` and the loop (or the call running it), or inside it."""
        # From the `eval()` to the loop's end: the calls between them, and those inside the loop.
        return any(receiver(c) is not None and dotted(receiver(c)) == model
                   for c in self.ctx.definitions.named("train").between(self.ctx.order[evaluation], self.ctx.subtree_end[reached]))
