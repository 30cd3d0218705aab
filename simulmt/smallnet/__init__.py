"""The small-network kit of the segmenter (`simulmt.segment`) and the restorer
(`simulmt.restore`): hashed word features (`features`), a checked config, the word embedding
and the weight file (`net`), and their training loop (`fitting`, imported only to train).
"""

from simulmt.smallnet.features import N_FLAGS, N_IDS, word_features, words_features
from simulmt.smallnet.net import HashedWordNet, NetConfig, load_net, save_net

__all__ = [
    "N_FLAGS",
    "N_IDS",
    "HashedWordNet",
    "NetConfig",
    "load_net",
    "save_net",
    "word_features",
    "words_features",
]
