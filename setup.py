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
        "keras-hub>=0.20.0,<1",  # what keras-nlp is now published as
        "pillow>=10.1.0,<14",
        "pycocotools>=2.0.7,<3",
        "numpy>=1.26.0,<3",
        # Added: the reference implementations of the scores people quote, rather than our own.
        "pycocoevalcap>=1.2,<2",  # BLEU/METEOR/ROUGE-L/CIDEr exactly as the COCO server computes
        "sacrebleu>=2.3.0,<3",  # translation BLEU/chrF with a reproducible signature
        "matplotlib>=3.7.0,<4",  # attention heatmaps and plots
        "tqdm>=4.60.0,<5",  # progress bars on long decoding and evaluation loops
        "aiohttp>=3.9.0,<4",  # the TensorFlow-Serving-compatible REST server (asyncio, batching)
        # tf.summary.scalar/text/image live in tensorboard: the trainer's logs (scalars, sample
        # outputs, attention images) go through them rather than hand-built event protobufs.
        "tensorboard>=2.20.0,<3",
    ],
    extras_require={
        # Kept so that `pip install -e .[tensorboard]` still works; tensorboard is now required.
        "tensorboard": ["tensorboard>=2.20.0,<3"],
        # Keras's JAX backend on CPU: the JAX trainer's tests (a GPU machine installs its own
        # jax[cuda*] wheel instead; docs/jax.md).
        "jax": ["jax[cpu]>=0.10.2,<1"],
        "dev": [
            "jax[cpu]>=0.10.2,<1",
            "pytest>=8.0.0,<10",
            "ruff>=0.5.0",
            "playwright>=1.41.0,<2",  # drives the system Chromium in the HTML viewer's browser test
        ],
    },
    entry_points={
        "console_scripts": [
            "captioner=captioner.cli:main",
            "seq2seq=seq2seq.cli:main",
        ],
    },
)
