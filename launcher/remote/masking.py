"""What tfcluster masks wherever it prints or records a value: the one place the rule is
(docs/concepts/trust.md, "Secrets are masked").

A variable of ``env`` is a secret by its name or by its value (``is_secret``). An argument of a
task's command is masked by the same value rule, and by its option's name (``secret_option``: the
same words, matched as words of the name so that ``--max-tokens 512`` and ``--tokenizer`` stay
shown) in each of its spellings: ``--token X``, ``--token=X``, ``api_key=X``, ``db.password=X``,
and inside one argument that is a shell's command line (``sh -c "train.py --token X"``). Only
the secret is replaced by ``***``: ``postgres://bob:***@db/app`` keeps where it leads.

The plan's text and JSON, the record's plan.json (launcher/plan/model.py) and a forked task's
title (zygotechild.py) mask with this. A task's own argv and environment always hold the real
values. Stdlib only (Python 3.6+), shipped beside the task (launcher.remote.TASK_FILES).
"""

import re

MASK = "***"
# Words that make a variable's name a secret's (a part of the name between underscores for
# PAT, which is also in PATH; anywhere for the rest).
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE")
SECRET_PARTS = ("PAT", "PASS")
# Values that are secrets whatever the variable is called: a URL carrying a password
# (scheme://user:pw@host), the prefixes of common issued tokens, a PEM private key. Group 1: a
# URL's password (masked alone); the rest is masked whole.
_URL_PASSWORD = r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/\s:@]*:([^/\s@]+)@"
_TOKEN = (r"(?<![A-Za-z0-9])(?:"
          r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
          r"|(?:AKIA|ASIA)[A-Z0-9]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}"
          r"|glpat-[A-Za-z0-9_-]{20,}|AIza[A-Za-z0-9_-]{35})")
_PEM = r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*)"
SECRET_VALUE = re.compile(_URL_PASSWORD + "|" + _TOKEN + "|" + _PEM, re.S)


def is_secret(name, value=""):
    """Whether a variable holds a secret: its name says so (KEY, TOKEN, SECRET, PASSWORD, AUTH,
    PRIVATE, a PAT part...) or its value looks like one (a URL with a password, a token with a
    known issuer's prefix, a PEM private key)."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS) or any(part in SECRET_PARTS for part in upper.split("_")):
        return True
    return bool(value) and SECRET_VALUE.search(value) is not None


# A name's last word that says its value names where a secret is, not the secret: a file of it
# is what tfcluster asks for (the warning on arguments in `ps`).
_REFERENCE_WORDS = ("FILE", "PATH", "DIR", "ENV", "VAR", "NAME", "ID", "URL", "HOST", "USER", "TYPE", "LEN",
                    "LENGTH", "SIZE")


def secret_option(name):
    """Whether an option or a ``KEY=`` in a command names a secret: a word of it (split at ``-``,
    ``_``, ``.``) is one of ``SECRET_WORDS`` (CREDENTIALS too) or ends with one of the long ones
    (``APIKEY``, ``HFTOKEN``), or is PAT or PASS; not when its last word says it is where the
    secret is (``--token-file``, ``--key-path``) or what it is (``--key-size``)."""
    words = [w for w in re.split(r"[-_.]+", name.upper()) if w]
    if not words or words[-1] in _REFERENCE_WORDS:
        return False
    for word in words:
        if word in SECRET_WORDS or word in SECRET_PARTS or word == "CREDENTIALS":
            return True
        if len(word) > 4 and word.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")):
            return True
    return False


def _mask_value_match(m):
    if m.group(1) is not None:  # a URL: its password alone
        return m.group(0)[:m.start(1) - m.start(0)] + MASK + "@"
    return MASK


# ``--name`` alone (its value is the next argument); ``--name=VALUE`` / ``name=VALUE`` whole.
_OPTION = re.compile(r"--?([A-Za-z][A-Za-z0-9_.-]*)")
_ASSIGN = re.compile(r"(--?)?([A-Za-z_][A-Za-z0-9_.-]*)=(.+)", re.S)
# A word of a shell's command line (quoted parts in it whole), between blanks and operators.
_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|[^\s;&|()`'"])+""")
# How deep values inside values are read (``--a=--b=--token=X``); below that a value is masked
# whole: what is not read is not shown (and a hostile spec's nesting costs no more than this).
DEPTH = 8


def _quoted(word):
    """``(quote, inside)``: a word quoted whole (``'p w'``) apart from its quotes."""
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        return word[0], word[1:-1]
    return "", word


def _word(word, value_next, depth):
    """One word as shown, and whether the next word is the value of a secret's option.
    ``value_next``: this word is such a value (masked unless it is an option itself)."""
    quote, bare = _quoted(word)
    if value_next and not bare.startswith("-"):
        return quote + MASK + quote, False
    option = _OPTION.fullmatch(bare)
    if option:
        return word, secret_option(option.group(1))
    assign = _ASSIGN.fullmatch(bare)
    if assign:
        head = bare[:assign.start(3)]
        vquote, value = _quoted(assign.group(3))
        if secret_option(assign.group(2)) or depth >= DEPTH:
            return quote + head + vquote + MASK + vquote + quote, False
        # (its value may be a command line or a list: ``--extra='--token X'``, ``--export=ALL,HF_TOKEN=X``)
        return quote + head + vquote + _text(value, depth + 1)[0] + vquote + quote, False
    if "," in bare:  # a list's items: ``ALL,HF_TOKEN=X``
        if depth >= DEPTH:
            return quote + MASK + quote, False
        return quote + ",".join(_word(item, False, depth + 1)[0] for item in bare.split(",")) + quote, False
    return word, False


def _text(text, depth):
    """``text`` (a command line) as shown, and whether its last word asks for a value."""
    out, last, value_next = [], 0, False
    for m in _WORD.finditer(text):
        shown, value_next = _word(m.group(0), value_next, depth)
        out.append(text[last:m.start()] + shown)
        last = m.end()
    out.append(text[last:])
    return "".join(out), value_next


def mask_text(text):
    """``text`` with each secret in it replaced by ``***``: values that look like one, and the
    value of an option or assignment whose name says so, word by word as a shell splits a
    command line (``--token X``, ``--token=X``, ``NAME=X``, a list, a value that is itself a
    command line), ``DEPTH`` values deep."""
    return _text(SECRET_VALUE.sub(_mask_value_match, text), 0)[0]


def mask_argv(argv):
    """A command's arguments with every secret in them masked (``secret_option``'s names, in each
    spelling; ``is_secret``'s values anywhere); the others as they are. Each argument is one
    word (``--extra=--token X`` is one option's value); one with blanks and no ``=`` of its own
    is read as a command line (``sh -c "train.py --token X"``)."""
    out = []
    value_next = False
    for arg in map(str, argv):
        arg_masked = SECRET_VALUE.sub(_mask_value_match, arg)
        if value_next and not arg.startswith("-"):
            out.append(MASK)
            value_next = False
            continue
        if _OPTION.fullmatch(arg) or _ASSIGN.fullmatch(arg_masked):
            shown, value_next = _word(arg_masked, False, 0)
        else:
            shown, value_next = mask_text(arg), False
        out.append(shown)
    return out


_ISSUER = re.compile(r"gh[pousr]_|github_pat_|hf_|AKIA|ASIA|xox[abpr]-|sk-|glpat-|AIza|-----BEGIN")


def masked_args(argv):
    """The arguments of ``argv`` that hold a secret, as ``mask_argv`` finds them: each one's
    option, name or shape, masked (``--hub-token ***``, ``postgres://bob:***@db``), for a warning
    that names them without showing them."""
    argv = [str(a) for a in argv]
    masked = mask_argv(argv)
    out = []
    for i, (arg, shown) in enumerate(zip(argv, masked)):
        if arg == shown:
            continue
        option = _OPTION.fullmatch(argv[i - 1]) if i > 0 else None
        if shown == MASK and option and secret_option(option.group(1)):
            out.append(argv[i - 1] + " " + MASK)
        elif shown == MASK:
            kind = _ISSUER.match(arg)
            out.append("argument %d (%s)" % (i, kind.group(0) + "..." if kind else "a secret"))
        else:
            out.append(shown if len(shown) <= 80 else "argument %d (a command line that holds one)" % i)
    return out
