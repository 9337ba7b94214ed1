"""Which runtime policies a part of the GPU suite runs: a comma-separated list of catalogue names, where
`peers` stands for every retrieval policy but FreeKV and `all` for every runtime policy."""

from __future__ import annotations

__all__ = ["WORDS", "parse_methods"]

WORDS = {
    "peers": "every retrieval policy of the catalogue but freekv",
    "all": "every runtime policy of the catalogue",
}


def _expand(word: str) -> tuple[str, ...]:
    from traces.catalogue import names

    if word == "peers":
        return tuple(m for m in names(kind="retrieval", runtime=True) if m != "freekv")
    if word == "all":
        return names(runtime=True)
    return (word,)


def parse_methods(text: str, flag: str) -> tuple[str, ...]:
    """The policies `text` names, in order, each once; ValueError naming `flag` and the valid names."""
    from traces.catalogue import canonical, names

    valid = names(runtime=True)
    out: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        for name in _expand(word):
            name = canonical(name)
            if name not in valid:
                raise ValueError(
                    f"{flag}: {word!r} is not a runtime policy; valid: {', '.join(valid)}, "
                    f"or {', '.join(f'{w} ({d})' for w, d in WORDS.items())}"
                )
            if name not in out:
                out.append(name)
    if not out:
        raise ValueError(f"{flag}: empty list; give policy names, 'peers' or 'all'")
    return tuple(out)
