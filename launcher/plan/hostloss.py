"""How a lost host reads, in the record (a host_lost event's ``how``) and on the console: one
phrase, shared by the replanning (plan/elastic.py), the supervisor's membership and the record's
view."""

SUSPECT = "suspect until"  # in a host_lost event's ``how``: the host's session was lost (see lost_phrase)


def lost_phrase(host: str, how: str, when: str = "") -> str:
    """How a host loss reads in one line: ``h2: session lost at 12:01:07, host still answering;
    suspect until it answers for 30 s`` (a suspect host: its ``how`` says when), else
    ``h2 lost at 12:01:07 (gone from discovery.command's list)``."""
    if SUSPECT in how:
        return f"{host}: {how}"
    return f"{host} lost{when}" + (f" ({how})" if how else "")
