"""Show, Attend and Tell (Xu et al. 2015): image captioning with soft and hard attention."""
