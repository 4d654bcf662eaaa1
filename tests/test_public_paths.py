"""Every spelling of one framework API reaches the same rules (lintloop.frameworks.public_path): a
program imported through a re-export or a private module gives the findings it gives imported publicly."""

import re

import pytest

from example_expectations import example_source, findings
from lintloop.frameworks import public_path
from lintloop.rules import ALL_RULES, BY_CODE

PUBLIC_IMPORT = re.compile(r"^import tensorflow as tf$", re.MULTILINE)
TF_EXAMPLES = [(rule, index) for rule in ALL_RULES if rule.has_visitor() and "tf" in rule.frameworks
               for index, example in enumerate(rule.flagged) if PUBLIC_IMPORT.search(example_source(example))]


def places(rule, source: str) -> list[tuple[int, int, str]]:
    return [(f.line, f.column, f.code) for f in findings(rule, source)]


@pytest.mark.parametrize("path,public", [
    ("tensorflow.compat.v2", "tensorflow"),
    ("tensorflow.compat.v2.distribute.MirroredStrategy", "tensorflow.distribute.MirroredStrategy"),
    ("tensorflow.python.eager.def_function.function", "tensorflow.function"),
    ("keras.src.layers.Dense", "keras.layers.Dense"),
    ("torch.nn.modules.loss.CrossEntropyLoss", "torch.nn.CrossEntropyLoss"),
    ("torch.nn.modules", "torch.nn"),
    ("jax._src.random.split", "jax.random.split"),
    ("jax._src.api.jit", "jax.jit"),
    ("tensorflow.compat.v1.Session", "tensorflow.compat.v1.Session"),  # TF1 keeps its own semantics
    ("tf_keras.layers.Dense", "tf_keras.layers.Dense"),  # Keras 2: merged only where a rule asks canonically
    ("torch.nn.functional.softmax", "torch.nn.functional.softmax"),
])
def test_public_path(path, public):
    assert public_path(path) == public


def test_every_tensorflow_example_is_found_through_compat_v2():
    assert len(TF_EXAMPLES) >= 20
    for rule, index in TF_EXAMPLES:
        source = example_source(rule.flagged[index])
        compat = PUBLIC_IMPORT.sub("import tensorflow.compat.v2 as tf", source)
        assert places(rule, compat) == places(rule, source), (rule.code, index)


@pytest.mark.parametrize("code,public,private", [
    ("LL201", "import tensorflow as tf\n# (one line, as the other spelling)\n", "import tensorflow as tf\nfrom tensorflow.python.eager.def_function import function\n"),
    ("LL708", "from torch.nn import CrossEntropyLoss\n", "from torch.nn.modules.loss import CrossEntropyLoss\n"),
    ("LL901", "from jax import random\n", "from jax._src import random\n"),
])
def test_private_spellings_reach_the_rule(code, public, private):
    programs = {
        "LL201": "{imports}@{decorator}\ndef step(x):\n    print('x', x)\n    return x * 2\n"
                 "for i in range(100):\n    step(tf.constant(i))\n",
        "LL708": "import torch\n{imports}model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Softmax(dim=1))\n"
                 "criterion = CrossEntropyLoss()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                 "for x, y in loader:\n    opt.zero_grad()\n    loss = criterion(model(x), y)\n"
                 "    loss.backward()\n    opt.step()\n",
        "LL901": "import jax\n{imports}key = random.PRNGKey(0)\nx = random.normal(key, (3,))\n"
                 "y = random.normal(key, (3,))\nprint(x + y)\n",
    }
    rule = BY_CODE[code]
    public_program = programs[code].format(imports=public, decorator="tf.function")
    private_program = programs[code].format(imports=private, decorator="function" if code == "LL201" else "")
    found = places(rule, public_program)
    assert found and places(rule, private_program) == found
