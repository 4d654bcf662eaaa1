"""`ctx.keras`: Keras models' output activations, and the cross-entropies applied to them."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext
from lintloop.analysis.keras_models import call_with_keyword


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def last_expression(ctx: FileContext) -> cst.BaseExpression:
    statement = ctx.module.body[-1]
    return statement.body[0].value


def model_activation(code: str) -> str | None:
    ctx = context(code)
    output = ctx.keras.model_output(last_expression(ctx))
    return output.activation if output else None


def tensor_activation(code: str) -> str | None:
    ctx = context(code)
    output = ctx.keras.output_of(last_expression(ctx))
    return output.activation if output else None


@pytest.mark.parametrize("code,expected", [
    # Sequential, any spelling; pass-through layers looked through
    ("import tensorflow as tf\nm = tf.keras.Sequential([tf.keras.layers.Dense(4), tf.keras.layers.Dense(3, "
     "activation='softmax')])\nm", "softmax"),
    ("from tensorflow.keras.layers import Dense, Dropout\nfrom tensorflow.keras.models import Sequential\n"
     "m = Sequential([Dense(4, 'relu'), Dense(3), Dropout(0.2)])\nm", "linear"),
    ("import tf_keras as keras\nm = keras.Sequential([keras.layers.Dense(1, activation=keras.activations.sigmoid)])\n"
     "m", "sigmoid"),
    ("import keras\nm = keras.Sequential([keras.layers.Dense(3), keras.layers.Activation('softmax')])\nm", "softmax"),
    ("import keras\nm = keras.Sequential([keras.layers.Dense(3), keras.layers.Softmax()])\nm", "softmax"),
    ("import keras\nm = keras.Sequential([keras.layers.Dense(3, activation=None)])\nm", "linear"),
    ("import keras\nm = keras.Sequential([keras.layers.Conv2D(8, 3), keras.layers.Flatten()])\nm", "linear"),
    # the `.add` chain: the last added layer
    ("import keras\nm = keras.Sequential()\nm.add(keras.layers.Dense(8, activation='relu'))\n"
     "m.add(keras.layers.Dense(2, activation='sigmoid'))\nm", "sigmoid"),
    # the functional API
    ("import keras\ninp = keras.Input((4,))\nx = keras.layers.Dense(8, activation='relu')(inp)\n"
     "out = keras.layers.Dense(3, activation='softmax', name='probs')(x)\nm = keras.Model(inp, out)\nm", "softmax"),
    ("import keras\nimport tensorflow as tf\ninp = keras.Input((4,))\nlogits = keras.layers.Dense(3)(inp)\n"
     "m = keras.Model(inputs=inp, outputs=tf.nn.softmax(logits))\nm", "softmax"),
    ("import keras\ninp = keras.Input((4,))\nhead = keras.layers.Dense(3)\nm = keras.Model(inp, [head(inp)])\nm",
     "linear"),
    # a subclassed model: what `call` returns
    ("import keras\nclass Net(keras.Model):\n    def __init__(self):\n        super().__init__()\n"
     "        self.out = keras.layers.Dense(3)\n    def call(self, x):\n        return self.out(x)\nm = Net()\nm",
     "linear"),
    ("import tensorflow as tf\nclass Net(tf.keras.Model):\n    def __init__(self):\n        super().__init__()\n"
     "        self.out = tf.keras.layers.Dense(3)\n    def call(self, x):\n        logits = self.out(x)\n"
     "        return tf.nn.softmax(logits)\nm = Net()\nm", "softmax"),
    # builder functions, applications, copies
    ("import keras\ndef build():\n    return keras.Sequential([keras.layers.Dense(3)])\nm = build()\nm", "linear"),
    ("import keras\nm = keras.applications.ResNet50(weights=None, classes=10)\nm", "softmax"),
    ("import keras\nm = keras.applications.MobileNetV2(weights=None, classifier_activation=None)\nm", "linear"),
    ("import keras\nbase = keras.Sequential([keras.layers.Dense(3)])\n"
     "m = keras.Sequential([base, keras.layers.Softmax()])\nm", "softmax"),
    ("import keras\nbase = keras.Sequential([keras.layers.Dense(3)])\nm = keras.models.clone_model(base)\nm", "linear"),
])
def test_model_output(code, expected):
    assert model_activation(code) == expected


@pytest.mark.parametrize("code", [
    "import keras\nm = keras.models.load_model('m.keras')\nm",
    "import keras\nm = keras.applications.ResNet50(include_top=False)\nm",
    "import keras\nm = keras.Sequential([keras.layers.Dense(3), keras.layers.Lambda(lambda t: t * 2)])\nm",
    "import keras\nm = keras.Sequential([keras.layers.Dense(3, activation=act)])\nm",
    "import keras\ninp = keras.Input((4,))\nm = keras.Model(inp, [keras.layers.Dense(3)(inp), keras.layers.Dense(1)(inp)])\nm",
    "from mylib import Sequential, Dense\nm = Sequential([Dense(3)])\nm",
])
def test_model_output_unknown(code):
    assert model_activation(code) is None


@pytest.mark.parametrize("code,expected", [
    ("import keras\nm = keras.Sequential([keras.layers.Dense(3)])\ny = m(x, training=True)\ny", "linear"),
    ("import tensorflow as tf\nlogits = model_fn(x)\np = tf.nn.softmax(logits)\np", "softmax"),
    ("import keras\np = keras.layers.Dense(3, activation='softmax')(h)\nq = keras.ops.cast(p, 'float32')\nq", "softmax"),
    ("import keras\np = keras.layers.Dense(3, activation='softmax')(h)\np = keras.layers.Dropout(0.1)(p)\np", "softmax"),
])
def test_tensor_output(code, expected):
    assert tensor_activation(code) == expected


def test_tensor_output_unknown_for_predictions_and_user_functions():
    assert tensor_activation("import keras\nm = keras.Sequential([keras.layers.Dense(3)])\np = m.predict(x)\np") is None
    assert tensor_activation("import keras\ndef softmax(t):\n    return t\np = softmax(x)\np") is None


def uses(code: str):
    ctx = context(code)
    return [(u.loss.kind, u.loss.from_logits, u.loss.spelling, u.output.activation) for u in ctx.keras.loss_uses]


def test_compile_losses_every_spelling():
    code = """
        import tensorflow as tf
        from tensorflow import keras
        m = keras.Sequential([keras.layers.Dense(3)])
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        m.compile("adam", tf.keras.losses.CategoricalCrossentropy(from_logits=True))
        m.compile(loss=keras.losses.binary_crossentropy)
        m.compile(loss="mse")
    """
    assert uses(code) == [("sparse_categorical", False, "string", "linear"),
                          ("categorical", True, "class", "linear"),
                          ("binary", False, "reference", "linear")]


def test_loss_calls_in_a_custom_loop():
    code = """
        import keras
        import tensorflow as tf
        model = keras.Sequential([keras.layers.Dense(3, activation="softmax")])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=flag)
        for x, y in data:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                other = keras.losses.categorical_crossentropy(y, model(x), True)
                third = tf.keras.backend.sparse_categorical_crossentropy(y, model(x), from_logits=False)
                teacher = loss_fn(tf.nn.softmax(model(x)), y)
    """
    assert uses(code) == [("sparse_categorical", None, "class", "softmax"),
                          ("categorical", True, "function", "softmax"),
                          ("sparse_categorical", False, "function", "softmax")]


def test_model_outputs_of_the_file():
    ctx = context("""
        import keras
        a = keras.Sequential([keras.layers.Dense(3, activation="softmax")])
        b = keras.Sequential()
        b.add(keras.layers.Dense(8))
        b.add(keras.layers.Dense(1, activation="sigmoid"))
        class Net(keras.Model):
            def call(self, x):
                return self.head(x)
    """)
    assert sorted(o.activation for o in ctx.keras.model_outputs()) == ["sigmoid", "softmax"]


@pytest.mark.parametrize("code,expected", [
    ("Dense(3)", 'Dense(3, dtype="float32")'),
    ("Dense(3, activation='softmax',)", "Dense(3, activation='softmax', dtype=\"float32\",)"),
    ("Dense(3, dtype='float16')", 'Dense(3, dtype="float32")'),
    ("Softmax()", 'Softmax(dtype="float32")'),
])
def test_call_with_keyword(code, expected):
    module = cst.parse_module(code + "\n")
    call = module.body[0].body[0].value
    assert call_with_keyword(module, call, "dtype", '"float32"') == expected
