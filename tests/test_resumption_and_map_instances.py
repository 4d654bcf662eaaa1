"""LL801 asks whether a file resumes from its checkpoints; LL502/LL504 see a callable instance of a
same-file class as a map function; LL503/LL504 judge a pipeline helper by the call that is trained on.
Each case runs with the screen on and off: the findings must be the same."""

import textwrap

import pytest
from lintloop.rules import ALL_RULES

from lintloop.linter import lint_text
from lintloop.rule import RuleSet

RULES = {r.code: r for r in ALL_RULES}


def _found(code: str, source: str) -> list[tuple[int, str]]:
    text = textwrap.dedent(source).lstrip()
    runs = [lint_text("case.py", text, RuleSet([RULES[code]], screen=screen)) for screen in (True, False)]
    on, off = ([(f.line, f.detailed) for f in run.findings if f.code == code] for run in runs)
    assert on == off, "the screen changed the findings"
    return on


AUGMENT = """
import tensorflow as tf
class Augment:
    def __init__(self, size, train, *, noise=False):
        self.size = size
        self.train = train
        self.noise = noise
    def __call__(self, image, label):
        image = tf.image.resize(image, (self.size, self.size))
        if not self.train:
            return image, label
        image = tf.image.random_flip_left_right(image) if self.noise else image
        return image, label
"""


@pytest.mark.parametrize("built, flagged", [
    ("Augment(32, True, noise=True)", True),     # positional flag on, keyword-only flag on
    ("Augment(32, train=True)", False),          # the random op is under `self.noise`, off by default
    ("Augment(32, False, noise=True)", False),   # `if not self.train: return ...`: nothing after it runs
    ("Augment(32, flag, noise=True)", True),     # a flag we cannot read: the random branch may run
])
def test_a_callable_instance_is_a_map_function_less_the_branches_its_flags_turn_off(built, flagged):
    source = AUGMENT + f"ds = tf.data.Dataset.from_tensor_slices((x, y)).map({built}).cache()\n"
    assert bool(_found("LL504", source)) is flagged


def test_an_instance_bound_to_a_name_and_a_helper_method_are_followed():
    source = """
    import tensorflow as tf
    class Noise:
        def __init__(self, std):
            self.std = std
        def __call__(self, x, y):
            return self.add(x), y
        def add(self, x):
            return x + tf.random.normal(tf.shape(x), stddev=self.std)
    noise = Noise(0.1)
    train_ds = tf.data.Dataset.from_tensor_slices((x, y)).map(noise).batch(16)
    model.fit(train_ds, epochs=3)
    """
    assert [line for line, _ in _found("LL502", source)] == [10]


def test_an_instance_of_a_class_without_call_is_not_a_map_function():
    source = """
    import tensorflow as tf
    class Table:
        def lookup(self, x, y):
            return tf.random.shuffle(x), y
    train_ds = tf.data.Dataset.from_tensor_slices((x, y)).map(Table()).batch(16)
    model.fit(train_ds, epochs=3)
    """
    assert _found("LL502", source) == []


HELPER = """
import tensorflow as tf
def make(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(32).shuffle(64)
"""


@pytest.mark.parametrize("uses, flagged", [
    ("model.fit(make(a, b), validation_data=make(c, d))", True),
    (("train_ds = make(a, b)\nfor xb, yb in train_ds:\n    with tf.GradientTape() as tape:\n"
      "        loss = loss_fn(yb, model(xb))\n    opt.apply_gradients(zip(tape.gradient(loss, w), w))\n"
      "model.evaluate(make(c, d))"), True),
    ("model.evaluate(make(c, d))\nmodel.predict(make(e, f))", False),
])
def test_a_helper_is_judged_by_the_call_that_is_trained_on(uses, flagged):
    assert bool(_found("LL503", HELPER + uses + "\n")) is flagged


TRAIN = """
import torch
def train(model, optimizer, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            model(x, y).backward()
            optimizer.step()
        torch.save(model.state_dict(), f"epoch_{epoch}.pt")
def predict(path, x):
    model = Net()
    model.load_state_dict(torch.load(path))
    model.eval()
    return model(x)
"""


def test_weights_loaded_only_for_inference_mean_nothing_resumes():
    main = "if __name__ == '__main__':\n    train(Net(), opt, loader, 3)\n    print(predict('epoch_2.pt', x))\n"
    assert _found("LL801", TRAIN + main) == []


def test_an_option_to_resume_is_evidence_even_beside_inference_loads():
    main = ("import argparse\nparser = argparse.ArgumentParser()\n"
            "parser.add_argument('--resume', help='checkpoint to resume from')\n")
    [(line, message)] = _found("LL801", TRAIN + main)
    assert line == 8 and "offers to resume training (the option `'--resume'`" in message


def test_a_load_in_a_helper_method_called_before_the_training_loop_is_resumption():
    source = """
    import torch
    class Trainer:
        def __init__(self, model, opt):
            self.model, self.opt = model, opt
        def restore(self, path):
            self.model.load_state_dict(torch.load(path))
        def fit(self, loader, start=None):
            if start:
                self.restore(start)
            for x, y in loader:
                self.opt.zero_grad()
                self.model(x, y).backward()
                self.opt.step()
                torch.save(self.model.state_dict(), "last.pt")
    """
    [(line, message)] = _found("LL801", source)
    assert line == 14 and "line 6 loads `self.model`'s weights before training it" in message


def test_without_evidence_either_way_the_message_says_what_resumption_loses():
    source = TRAIN.split("def predict")[0]
    [(_, message)] = _found("LL801", source)
    assert "a run resumed from it restarts the optimizer's state" in message
