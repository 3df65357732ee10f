"""What a `shapes` caption says: `parse_caption` reads it into objects and relations.

Every score of `captioner.datasets.shapes_metrics` (object and relation accuracy, objects
named twice, the self-critical reward's facts) reads captions through this one parser, so they
agree on what was said.

The grammar. A caption is lowercased and cut into words and marks (`, ; : .`; any
other mark is an unknown word).
- Fillers, dropped: "there is", "a picture of", "the image shows", "on a dark background",
  "two shapes :", "three shapes :", "single".
- Object phrases: `[a|an|one|the] [size] colour shape` names an object (an image never holds
  two of one colour and shape, so it is that one). `the [size] [colour] shape|one` with the
  colour or the shape left out ("the circle", "the red one") refers back to the one object
  named before it that fits. "it", and "its" in "to its left", refer back to the one object
  named before them that is not the subject of their clause.
- Relations, where `Y` is an object phrase or "it": "(to|on) the left/right of Y",
  "left/right of Y", "(to|on) its left/right", "above/over/on top of Y", "below/under/
  beneath/underneath Y". Relations joined by "and" share their `Y` ("above and to the left
  of Y": two relations). A relation with no `Y` ("to the right", "above" before "is" or at
  the end of its clause) is bare: it is to the one object named before it other than its
  subject, or, when none was, to the subject of the next clause if that clause states the
  inverse bare ("to the left is X , to the right Y": X is left of Y, one fact).
- Clauses, cut at `, ; : .`, "and", "where", "while" (", and" is one cut): `X` (an object
  listed); `X [is] R Y` (X is R of Y); `X [is] R` (bare); fronted `R Y [is] X` and `R [is] X`
  (X is R of Y); and `R Y` right after a clause that states a relation of its subject to an
  object, which says that subject is also R of Y ("a red circle left of a blue square and
  above a green diamond"). "and" between object phrases lists them: "a red circle above a blue
  square and a green diamond" says nothing of the diamond. This covers every caption
  `shapes.make_captions` writes.

A caption is unreadable when it holds a word the grammar does not know or cannot place
("beside", "<unk>", a lone "left"), or a statement it cannot attach: "of" with nothing after
it, a relation with no subject, two object phrases with nothing between them, words left over
(a chain "X left of Y above Z": which is above Z?), a pronoun or a bare relation with no or
several candidates (a bare relation that may be to an earlier object or to the next clause's
has two), a "the" phrase that fits no or several earlier objects, an object given two sizes,
a cut with nothing before or after it (a caption cut short). It is scored as wrong, never as
right.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from captioner.datasets.shapes import COLOURS, INVERSE, SHAPES, SIZES

_TOKEN = re.compile(r"<[a-z]+>|[a-z]+|\S")  # "<unk>" is one (unknown) word
_PUNCTUATION = (",", ";", ":", ".")
_CONJUNCTIONS = ("and", "where", "while")
_FILLERS = (("there", "is"), ("a", "picture", "of"), ("the", "image", "shows"),
            ("on", "a", "dark", "background"), ("two", "shapes", ":"), ("three", "shapes", ":"),
            ("two", "shapes"), ("three", "shapes"), ("single",))
_PREPOSITIONS = {"above": "above", "over": "above", "below": "below", "under": "below",
                 "beneath": "below", "underneath": "below"}
# Words that state a relation; with the unknown words, what an unreadable caption may state.
RELATION_WORDS = frozenset({"left", "right", "top", *_PREPOSITIONS})


@dataclass(frozen=True)
class NamedObject:
    """An object a caption names: its colour, shape and (when stated) size."""

    colour: str
    shape: str
    size: str | None = None


@dataclass(frozen=True)
class ParsedCaption:
    """What a caption says (see the module docstring for the grammar).

    Attributes:
        objects: the distinct objects it names, in the order first named (read as far as
            possible even when the caption is unreadable).
        relations: `(i, relation, j)`: "objects[i] is <relation> of objects[j]", each fact
            once; () when the caption is unreadable.
        named_twice: it names an object twice.
        problems: why it cannot be read; () when it can.
        unread: when unreadable, how many relations it may state that could not be read (its
            relation words and unknown words, at least 1), all counted false; else 0.
    """

    objects: tuple[NamedObject, ...] = ()
    relations: tuple[tuple[int, str, int], ...] = ()
    named_twice: bool = False
    problems: tuple[str, ...] = ()
    unread: int = 0

    @property
    def readable(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class _Mention:
    """An object phrase (`obj` its index, None when it names no object) or "it"/"its"
    (`pronoun`; `before`: the objects named before it)."""

    obj: int | None
    definite: bool = False
    first: bool = True
    pronoun: bool = False
    before: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Relation:
    """A relation phrase: `relations` (several when joined by "and"), whether an object may
    (`takes`) or must (`needs`: "... of") follow, the pronoun of "to its left" (`complement`),
    and the objects named before it (`before`)."""

    relations: tuple[str, ...]
    takes: bool
    needs: bool
    complement: _Mention | None
    before: tuple[int, ...]


@dataclass(frozen=True)
class _Clause:
    """`subject relation complement`, any of them absent (see the module docstring)."""

    subject: _Mention | None
    relation: _Relation | None = None
    complement: _Mention | None = None


def _relation_at(words: Sequence[str], k: int):
    """The relation phrase starting at `words[k]`: `(end, relations, takes, needs, its)`."""
    w = [*words[k:k + 4], "", "", "", ""]
    if w[0] in _PREPOSITIONS:
        return k + 1, (_PREPOSITIONS[w[0]],), True, False, False
    if w[:3] == ["on", "top", "of"]:
        return k + 3, ("above",), True, True, False
    if w[:2] == ["on", "top"]:
        return k + 2, ("above",), False, False, False
    if w[0] in ("to", "on") and w[1] in ("the", "its") and w[2] in ("left", "right"):
        if w[1] == "its":
            return k + 3, (w[2],), False, False, True
        if w[3] == "of":
            return k + 4, (w[2],), True, True, False
        return k + 3, (w[2],), False, False, False
    if w[0] in ("left", "right") and w[1] == "of":
        return k + 2, (w[0],), True, True, False
    return None


def _mention_at(words: Sequence[str], k: int):
    """The object phrase starting at `words[k]`: `(end, determiner, size, colour, shape)`."""
    i = k
    determiner = words[i] if words[i] in ("a", "an", "one", "the") else None
    i += determiner is not None
    parts = []
    for vocabulary in (SIZES, COLOURS, SHAPES):
        parts.append(words[i] if i < len(words) and words[i] in vocabulary else None)
        i += parts[-1] is not None
    size, colour, shape = parts
    if shape is None and determiner == "the" and (size or colour) and words[i:i + 1] == ["one"]:
        i += 1  # "the red one"
    elif not (size or colour or shape):
        return None
    return i, determiner, size, colour, shape


class _Reader:
    """Reads one caption; see `parse_caption`."""

    def __init__(self):
        self.objects: list[NamedObject] = []
        self.relations: list[tuple[int, str, int]] = []
        self.problems: list[str] = []
        self.twice = False
        self.unknown = 0

    def read(self, words: list[str]) -> None:
        kept, k = [], 0
        while k < len(words):  # the fillers out
            filler = next((f for f in _FILLERS if tuple(words[k:k + len(f)]) == f), None)
            kept += [] if filler else [words[k]]
            k += len(filler) if filler else 1
        clauses = [self._clause(items) for items in self._split(self._lex(kept))]
        self._state([c for c in clauses if c is not None])

    def _lex(self, words: list[str]) -> list:
        """`words` as object phrases (`_Mention`), relations (`_Relation`), "is" and cuts."""
        items: list = []
        k = 0
        while k < len(words):
            word = words[k]
            relation = _relation_at(words, k)
            mention = _mention_at(words, k)
            if word in _PUNCTUATION or word in _CONJUNCTIONS or word == "is":
                items.append(word)
                k += 1
            elif word == "it":
                items.append(_Mention(None, pronoun=True, before=tuple(range(len(self.objects)))))
                k += 1
            elif relation:
                k, relations, takes, needs, its = relation
                before = tuple(range(len(self.objects)))
                pronoun = _Mention(None, pronoun=True, before=before) if its else None
                if (len(items) >= 2 and items[-1] == "and" and isinstance(items[-2], _Relation)
                        and items[-2].complement is None):  # "above and to the left of"
                    first = items.pop(-2)
                    items[-1] = _Relation(first.relations + relations, takes, needs, pronoun,
                                          first.before)
                else:
                    items.append(_Relation(relations, takes, needs, pronoun, before))
            elif mention:
                end, determiner, size, colour, shape = mention
                items.append(self._name(" ".join(words[k:end]), determiner, size, colour, shape))
                k = end
            else:
                known = (word in RELATION_WORDS or word in SIZES or word in COLOURS
                         or word in SHAPES or word in ("a", "an", "one", "the", "its", "of",
                                                       "to", "on", "there"))
                self.unknown += not known
                self.problems.append(f"cannot read {word!r} here" if known
                                     else f"unknown word {word!r}")
                k += 1
        return items

    def _name(self, words: str, determiner, size, colour, shape) -> _Mention:
        """The object the phrase `words` names, added to `objects` when it is new."""
        definite = determiner == "the"
        if colour and shape:
            found = [i for i, o in enumerate(self.objects)
                     if (o.colour, o.shape) == (colour, shape)]
            if not found:
                self.objects.append(NamedObject(colour, shape, size))
                return _Mention(len(self.objects) - 1, definite)
            self.twice |= not definite
        elif definite and (colour or shape):
            found = [i for i, o in enumerate(self.objects)
                     if colour in (None, o.colour) and shape in (None, o.shape)
                     and (size is None or o.size in (None, size))]
            if len(found) != 1:
                self.problems.append(f"{words!r} fits {len(found)} objects named before it; "
                                     "expected one")
                return _Mention(None, definite)
        else:
            self.problems.append(f"{words!r} does not say which object")
            return _Mention(None, definite)
        (obj,) = found
        known = self.objects[obj].size
        if size is not None and known is None:
            self.objects[obj] = replace(self.objects[obj], size=size)
        elif size is not None and size != known:
            self.problems.append(f"{words!r} gives a {known} object another size")
        return _Mention(obj, definite, first=False)

    def _split(self, items: list) -> list[list]:
        """The clauses of `items`, cut at punctuation and conjunctions (", and" is one cut)."""
        clauses: list[list] = []
        current: list = []
        cut = None
        for item in items:
            if not isinstance(item, str) or item == "is":
                current.append(item)
            elif current:
                clauses.append(current)
                current, cut = [], item
            elif cut is None:
                self.problems.append(f"the caption starts with {item!r}")
            elif not (cut in _PUNCTUATION and item in _CONJUNCTIONS):
                self.problems.append(f"nothing between {cut!r} and {item!r}")
            else:
                cut = item
        if current:
            clauses.append(current)
        elif cut is not None and cut != ".":
            self.problems.append(f"the caption ends with {cut!r}")
        return clauses

    def _clause(self, items: list) -> _Clause | None:
        """One clause's subject, relation and explicit object (see the module docstring)."""
        def mention(i: int) -> bool:
            return i < len(items) and isinstance(items[i], _Mention)

        subject = items[0] if mention(0) else None
        i = int(subject is not None)
        copula = i < len(items) and items[i] == "is"
        i += copula
        if i == len(items) and subject is not None and not copula:
            return _Clause(subject)
        if not (i < len(items) and isinstance(items[i], _Relation)) or (copula and not subject):
            self.problems.append("a clause that is not an object, a relation of one, or a "
                                 "list of them")
            return None
        relation, complement = items[i], items[i].complement
        i += 1
        if complement is None and relation.takes and mention(i):
            complement, i = items[i], i + 1
        if complement is None and relation.needs:
            self.problems.append("'of' with no object after it")
            return None
        if subject is None:  # fronted: "to the left of Y is X", "to the left is X"
            fronted_is = i < len(items) and items[i] == "is"
            i += fronted_is
            if mention(i):
                subject, i = items[i], i + 1
            elif fronted_is or complement is None:
                self.problems.append("a relation with no object it is about")
                return None
        if i != len(items):
            self.problems.append("words left over after a relation and its object")
            return None
        return _Clause(subject, relation, complement)

    def _state(self, clauses: list[_Clause]) -> None:
        """The relations the clauses state, their pronouns and bare relations resolved."""
        continued = None  # the subject of the last clause that stated a relation to an object
        k = 0
        while k < len(clauses):
            clause = clauses[k]
            k += 1
            if clause.relation is None:  # an object listed
                if clause.subject.pronoun:
                    self.problems.append("a pronoun that states nothing")
                elif clause.subject.definite and not clause.subject.first:
                    self.twice = True  # "... and the red circle": named again, for nothing
                continued = None
            elif clause.complement is not None:  # "X is R Y", "R Y is X", or "R Y" after one
                subject = clause.subject
                if subject is None:
                    if continued is None:
                        self.problems.append("a relation with no object it is about")
                        continue
                    subject = _Mention(continued)
                if subject.pronoun:
                    other = self._resolve(clause.complement, None)
                    subject = self._resolve(subject, other)
                else:
                    subject = self._resolve(subject, None)
                    other = self._resolve(clause.complement, subject)
                self._add(subject, clause.relation.relations, other)
                continued = subject
            else:  # bare: "X is to the right", "to the left is X"
                continued = None
                subject = self._resolve(clause.subject, None)
                candidates = [i for i in clause.relation.before if i != subject]
                partner = clauses[k] if k < len(clauses) else None
                if partner is not None and _contrasts(clause, partner):
                    if candidates:
                        self.problems.append("a bare relation that may be to an earlier object "
                                             "or to the next clause's")
                        continue
                    k += 1
                    other = self._resolve(partner.subject or partner.complement, subject)
                    self._add(subject, clause.relation.relations, other)
                elif len(candidates) == 1:
                    self._add(subject, clause.relation.relations, candidates[0])
                else:
                    self.problems.append(f"a bare relation with {len(candidates)} objects it may "
                                         "be to; expected one")

    def _resolve(self, mention: _Mention, exclude: int | None) -> int | None:
        """The object `mention` names; a pronoun's is the one named before it that is not
        `exclude` (its clause's other object)."""
        if not mention.pronoun:
            return mention.obj
        candidates = [i for i in mention.before if i != exclude]
        if len(candidates) != 1:
            self.problems.append(f"a pronoun with {len(candidates)} objects it may refer to; "
                                 "expected one")
            return None
        return candidates[0]

    def _add(self, subject: int | None, relations: Sequence[str], other: int | None) -> None:
        if subject is None or other is None:
            return
        for relation in relations:
            if (subject, relation, other) not in self.relations and (
                    other, INVERSE[relation], subject) not in self.relations:
                self.relations.append((subject, relation, other))


def _contrasts(clause: _Clause, partner: _Clause) -> bool:
    """Whether `partner` states the inverse of `clause`'s bare relation, bare or as "R Y"
    with no subject ("to the left is X , to the right Y"; "above is X , below Y")."""
    if partner.relation is None:
        return False
    inverse = {INVERSE[r] for r in clause.relation.relations}
    bare = partner.subject is not None and partner.complement is None
    elliptic = partner.subject is None and not partner.complement.pronoun
    return set(partner.relation.relations) == inverse and (bare or elliptic)


def parse_caption(caption: str) -> ParsedCaption:
    """Read the objects and relations a `shapes` caption states (the module docstring's
    grammar).

    Example:
    >>> parsed = parse_caption("a small red circle to the left of a blue square")
    >>> parsed.objects
    (NamedObject(colour='red', shape='circle', size='small'), NamedObject(colour='blue', \
shape='square', size=None))
    >>> parsed.relations
    ((0, 'left', 1),)
    >>> parse_caption("a blue square , and to its left a red circle").relations
    ((1, 'left', 0),)
    >>> parse_caption("the red circle is above and to the left of the blue square").relations
    ((0, 'above', 1), (0, 'left', 1))
    >>> parse_caption("a red circle and a blue square and a green diamond to its left").problems
    ('a pronoun with 2 objects it may refer to; expected one',)
    """
    words = _TOKEN.findall(caption.lower())
    reader = _Reader()
    reader.read(words)
    if not reader.problems:
        return ParsedCaption(tuple(reader.objects), tuple(reader.relations), reader.twice)
    unread = max(1, reader.unknown + sum(w in RELATION_WORDS for w in words))
    return ParsedCaption(tuple(reader.objects), (), reader.twice, tuple(reader.problems), unread)
