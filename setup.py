"""Attention models in Keras 3: Show-Attend-Tell captioning and Bahdanau/Transformer translation."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

setup(
    name="attention-models",
    version="0.1.0",
    description=__doc__,
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["common", "common.*", "captioner", "captioner.*",
                                    "seq2seq", "seq2seq.*"]),
    package_data={"": ["*.json", "*.txt"]},
    install_requires=[
        # Each floor is a version the whole test suite has passed on, all floors together:
        # scripts/check_floors.sh installs exactly these and runs the tests (docs/compatibility.md).
        # The design's own dependencies.
        "tensorflow>=2.20.0,<2.22",
        "keras>=3.15.0,<4",
        # keras-hub is what keras-nlp is now published as; 0.32 is the first that imports without
        # TensorFlow, which the JAX trainer needs on machines that have none (docs/jax.md).
        "keras-hub>=0.32.0,<1",
        "pillow>=10.1.0,<14",
        # numpy 2: the jax extra (part of the test extras) needs it, and one tested set holds all
        # floors; pycocotools 2.0.8 and matplotlib 3.8.4 are the first built against numpy 2.
        "pycocotools>=2.0.8,<3",
        "numpy>=2.0.0,<3",
        # Added: the reference implementations of the scores people quote, rather than our own.
        "pycocoevalcap>=1.2,<2",  # BLEU/METEOR/ROUGE-L/CIDEr exactly as the COCO server computes
        "sacrebleu>=2.3.0,<3",  # translation BLEU/chrF with a reproducible signature
        "matplotlib>=3.8.4,<4",  # attention heatmaps and plots
        "tqdm>=4.60.0,<5",  # progress bars on long decoding and evaluation loops
        "aiohttp>=3.9.0,<4",  # the TensorFlow-Serving-compatible REST server (asyncio, batching)
        # tf.summary.scalar/text/image live in tensorboard: the trainer's logs (scalars, sample
        # outputs, attention images) go through them rather than hand-built event protobufs.
        "tensorboard>=2.20.0,<3",
        # Subword vocabularies: `sentencepiece` trains the models (common/text/subwords.py);
        # tensorflow-text holds the SentencePiece ops that go into the exported graph (what
        # TensorFlow Serving links), used directly rather than through keras-hub's tokenizer,
        # which leaves them unnamed (two models in one export then load as one). keras-hub
        # pulls both in too (tensorflow-text follows TensorFlow's minor).
        "sentencepiece>=0.2.0,<1",
        "tensorflow-text>=2.20.1,<2.22",
    ],
    extras_require={
        # Kept so that `pip install -e .[tensorboard]` still works; tensorboard is now required.
        "tensorboard": ["tensorboard>=2.20.0,<3"],
        # Keras's JAX backend on CPU: the JAX trainer's tests (a GPU machine installs its own
        # jax[cuda*] wheel instead; docs/jax.md).
        "jax": ["jax[cpu]>=0.10.2,<1"],
        # CTranslate2, OpenNMT's inference engine: `seq2seq export --format ctranslate2` and
        # translating or serving such an export (docs/serving.md); the tests take it too.
        "ctranslate2": ["ctranslate2>=4.8.5,<5"],
        "dev": [
            "jax[cpu]>=0.10.2,<1",
            "ctranslate2>=4.8.5,<5",
            "pytest>=8.0.0,<10",
            "pytest-xdist>=3.8.0,<4",  # the suite over every core (scripts/test.sh -n auto)
            "ruff>=0.5.0",
            "playwright>=1.41.0,<2",  # drives the system Chromium in the HTML viewer's browser test
            # TensorFlow Serving's own PredictionLog proto, to parse the warm-up file an export
            # writes (tests/common/export/test_warmup.py); the package writes it without it.
            "tensorflow-serving-api>=2.20.0,<2.22",
            # The suite's process guard (tests/process_guard.py): a test's process tree, ended
            # whatever the test's outcome.
            "psutil>=7.2.2,<8",
        ],
    },
    entry_points={
        "console_scripts": [
            "captioner=captioner.cli:main",
            "seq2seq=seq2seq.cli:main",
        ],
    },
)
