"""Operations (discover, cap, governor, plan) over the backends; none branches on a vendor."""

#: The journal of what joulectl changed (:mod:`joulectl.ops.journal`), under the host root. Here,
#: not in that module, so that a reader that only asks whether there is one (discover) does not
#: load it.
JOURNAL_PATH = "/var/lib/joulectl/state.json"
