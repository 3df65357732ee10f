"""Public datasets fetched from their official address and prepared for training.

`common.datasets.fetch` holds the table and the `fetch` sub-command; `download` the checked,
resumable download; `spa_eng` and `coco_captions` how each dataset is laid out. None of them
imports TensorFlow or Keras.
"""
