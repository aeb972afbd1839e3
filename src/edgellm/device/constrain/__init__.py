"""Schema-constrained output: each step's logits masked to what a grammar allows (llguidance).

`Constraint` is the request's wish (domain type); `library` is the one adapter over llguidance
(import, grammar compilation, the model's tokenizer); `TokenGuide` walks one generation through the
grammar. docs/constrained.md explains how and why.
"""

from edgellm.device.constrain.constraint import Constraint, ConstraintKind
from edgellm.device.constrain.guide import TokenGuide
from edgellm.device.constrain.library import GrammarTokenizer, load_library

__all__ = ["Constraint", "ConstraintKind", "GrammarTokenizer", "TokenGuide", "load_library"]
