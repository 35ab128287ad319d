"""Prepared answers of the fake ``nvidia-smi``: its read-only queries answered without Python.

joulectl's NVIDIA backend asks an emulated node three read-only questions: ``-q -x`` (the inventory
of discover), the cap's inventory ``--query-gpu=pci.bus_id,uuid,...,name --format=csv,noheader,nounits``
and the cap's readback ``--query-gpu=pci.bus_id,power.limit,enforced.power.limit
--format=csv,noheader,nounits``. Each Python start of the tool costs more CPU than joulectl's own
work on such a node, so the rendered ``bin/nvidia-smi`` is a POSIX shell script first (and the same
Python script as before after the shell part, which a Python interpreter reads as a string): for
exactly those argument lists it prints a prepared answer from ``state/nvsmi-answers/`` when the
answer is valid, and ``exec``\\ s the Python tool in every other case.

An answer ``<form>`` is valid while

* its link ``<link>.state`` (:data:`LINK`: ``qx.state``; the two CSV answers, always prepared
  together, share ``csv.state``), a hard link made from ``state/nvml.json`` by the writer, is
  still that file (``[ nvml.json -ef <link>.state ]``): every writer of the state (this tool, the tick, the
  renderer, ``write_nvml_state``) replaces the file by a rename, so a write is a new inode; the
  link keeps the old inode alive, so its number cannot come back; and
* ``nvml.json`` is not newer than the answer (``! [ nvml.json -nt <form> ]``): an edit in place
  (same inode) changes the file's mtime. The writer backdates ``nvml.json``'s mtime by a
  nanosecond and gives the answer that very mtime, so any later write, even in the same tick of
  the kernel's coarse clock, makes the state newer than the answer.

The answers are written by the Python tool under the state's lock, from the state it read (after
checking the link is the inode it read): all three after a query of one of the forms that it
answered itself; the two CSV ones after a set command that wrote the state (the ``-q -x`` document
would be a third of such a call's work, for a query a cap does not send; the next ``-q -x`` is
answered by Python and prepares it again). The tick loop only invalidates them (its
write is a rename). Where a hard link cannot be made (``simulate run --fuse`` refuses ``link``
through the mount, and its inode numbers are per path there), nothing is written and every call
is answered by Python. Beside the inventory answer the Python tool prepares the plan of the
shell's own ``-i <bus>,... -pl <W>`` (:mod:`joulectl.sim.tools.nvplan`, :func:`set_path`), which
writes the state and the two CSV answers as the Python tool would. The ``-q -x`` answer is stored
as printed; the shell prints it with the ``<timestamp>`` line replaced by the current time
(``LC_ALL=C date``, the format and the local time ``time.strftime`` uses), so the answer is
byte-identical to the Python tool's but for the time.

Standard library only, ``posix`` rather than ``os`` (imported by the tool when it publishes).
"""

from __future__ import annotations

import posix

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Where the answers live, relative to the node root.
ANSWERS = "state/nvsmi-answers"
#: The argument lists served, by answer name (the exact argv[1:] of joulectl.backends.nvidia's
#: QUERY_ARGV and READBACK_ARGV; a test holds them equal).
FORMS: dict[str, tuple[str, ...]] = {
    "qx": ("-q", "-x"),
    "rb": ("--query-gpu=pci.bus_id,power.limit,enforced.power.limit", "--format=csv,noheader,nounits"),
    "inv": ("--query-gpu=pci.bus_id,uuid,power.min_limit,power.max_limit,power.default_limit,power.limit,"
            "enforced.power.limit,power.draw,mig.mode.current,persistence_mode,name",
            "--format=csv,noheader,nounits"),
}
#: The hard link each served answer is valid by (``<link>.state``): the cap's two CSV answers share
#: one (they are always prepared together, and the shell's ``-pl`` makes one link, not two).
LINK = {"qx": "qx", "inv": "csv", "rb": "csv"}
#: The line of the ``-q -x`` answer the shell replaces with the current time.
TIMESTAMP_PREFIX = "\t<timestamp>"
_DATE_FORMAT = "%a %b %d %H:%M:%S %Y"  # nvsmi's time.strftime format


def form_of(args: list[str]) -> str | None:
    """The answer name of an argument list the shell serves, else None."""
    for name, form in FORMS.items():
        if tuple(args) == form:
            return name
    return None


def _sig(st: Any) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)


def _unlink(path: str) -> None:
    try:
        posix.unlink(path)
    except OSError:
        pass


def publish(root: str, answers: dict[str, str], read: Any) -> bool:
    """Write ``answers`` ({name: text printed}) for the state whose ``fstat`` is ``read``; the
    caller holds the state's lock. Never raises for the file system: returns whether they were
    written (False: the state changed since it was read, a link cannot be made, an answer is not
    ASCII, the ``-q -x`` text has no timestamp line, a query's text does not end in a newline)."""
    for name, text in answers.items():
        if not text.isascii() or (name == "qx" and f"\n{TIMESTAMP_PREFIX}" not in text):
            return False
        if name != "qx" and not text.endswith("\n"):  # the shell prints whole lines only
            return False
    links = {LINK[name] for name in answers if name in LINK}
    if any(name not in answers for name in LINK if LINK[name] in links):
        return False  # the answers sharing a link are prepared together, or none of them
    base = root.rstrip("/")
    state = f"{base}/state/nvml.json"
    folder = f"{base}/{ANSWERS}"
    pid = posix.getpid()
    anchor = f"{folder}/.{pid}.link.tmp"
    made: list[str] = []
    try:
        for attempt in range(3):
            try:
                posix.link(state, anchor)
                break
            except FileExistsError:
                _unlink(anchor)
            except FileNotFoundError:
                if attempt:
                    return False
                try:
                    posix.mkdir(folder, 0o755)
                except FileExistsError:
                    pass
        else:
            return False
        made.append(anchor)
        now = posix.lstat(anchor)
        if _sig(now) != _sig(read):
            return False  # replaced or edited since it was read: these answers are not its
        # Backdate the state by a nanosecond: any later write in place is then newer than the answers.
        posix.utime(anchor, ns=(now.st_atime_ns, now.st_mtime_ns - 1))
        mtime = posix.lstat(anchor).st_mtime_ns  # as the file system stored it
        for name, text in answers.items():
            tmp = f"{folder}/.{pid}.{name}.tmp"
            fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_TRUNC, 0o644)
            made.append(tmp)
            try:
                data = text.encode("ascii")
                while data:
                    data = data[posix.write(fd, data):]
            finally:
                posix.close(fd)
            posix.utime(tmp, ns=(mtime, mtime))
            posix.rename(tmp, f"{folder}/{name}")
            made.remove(tmp)
        if "plw" in answers:  # where the shell's -pl stages the answers it writes (nvplan)
            try:
                posix.mkdir(f"{folder}/.sh", 0o755)
            except FileExistsError:
                pass
        for name in sorted(links):  # the links last: an answer is served only once its link names the state
            tmp = f"{folder}/.{pid}.{name}.state.tmp"
            _unlink(tmp)
            posix.link(anchor, tmp)
            made.append(tmp)
            # Left in ``made`` after the rename: where ``<name>.state`` already is a link to the
            # same inode (the state unchanged since the last answers), rename(2) does nothing and
            # succeeds, and the temporary name stays; elsewhere it is gone and the unlink fails quietly.
            posix.rename(tmp, f"{folder}/{name}.state")
        return True
    except OSError:
        return False
    finally:
        for path in made:
            _unlink(path)


#: The programs the shell's power-limit write runs, by name (see :func:`set_path`; ``rm`` only
#: after a failure). Each runs with ``LC_ALL=C``: no locale to load (a quarter of a millisecond of
#: each one's start under ``C.UTF-8``; their messages are the same).
SET_TOOLS = ("flock", "ln", "touch", "mv", "rm")


def set_path(tools: dict[str, str]) -> str:
    """The shell's ``-i <bus>,... -pl <W>`` (:mod:`joulectl.sim.tools.nvplan`): ``_pl BUSES W``
    returns 0 once it has written and printed everything, 1 (the lock released, the state as it
    was) where the Python tool must run. ``tools``: :data:`SET_TOOLS`' absolute paths."""
    flock, ln, touch, mv, rm = (tools[name] for name in SET_TOOLS)
    return (
        "  _pl() {\n"
        "    # W: a plain number of watts, at most two decimals -> m (mW)\n"
        "    i=${2%%.*} d=\n"
        "    case $2 in *.*) d=${2#*.};; esac\n"
        "    case $i in ''|0*|*[!0-9]*|??????*) return 1;; esac\n"
        "    case $d in '') m=${i}000;; [0-9]) m=$i${d}00;; [0-9][0-9]) m=$i${d}0;; *) return 1;; esac\n"
        "    [ \"$s\" -ef \"$a/csv.state\" ] && ! [ \"$s\" -nt \"$a/inv\" ] && [ -f \"$a/plw\" ] || return 1\n"
        "    command exec 9<>\"${s%/*}/nvml.lock\" || return 1\n"
        f"    LC_ALL=C '{flock}' 9 && _pl_locked \"$1\" \"$m\" && return 0\n"
        "    exec 9>&-\n"
        "    return 1\n"
        "  }\n"
        "  _pl_locked() {\n"
        "    [ \"$s\" -ef \"$a/csv.state\" ] && ! [ \"$s\" -nt \"$a/inv\" ] && ! [ \"$s\" -nt \"$a/rb\" ] &&\n"
        "      ! [ \"$s\" -nt \"$a/pl\" ] &&\n"
        "      [ -f \"$a/plw\" ] && [ -f \"$a/pl\" ] && [ -d \"$a/.sh\" ] || return 1\n"
        "    command . \"$a/plw\" && command . \"$a/pl\" || return 1\n"
        "    # the GPUs named, each once, each one the shell may write, m in its range -> t (indices)\n"
        "    t= r=$1,\n"
        "    while [ -n \"$r\" ]; do\n"
        "      x=${r%%,*} r=${r#*,} j=0 k=\n"
        "      while [ $j -lt $n ]; do\n"
        "        eval '[ \"$b'$j'\" = \"$x\" ]' && { k=$j; break; }\n"
        "        j=$((j + 1))\n"
        "      done\n"
        "      [ -n \"$k\" ] || return 1\n"
        "      case \" $t \" in *\" $k \"*) return 1;; esac\n"
        "      eval '[ $ok'$k' = 1 ] && [ $lo'$k' -le '$2' ] && [ '$2' -le $hi'$k' ]' || return 1\n"
        "      t=\"$t $k\"\n"
        "    done\n"
        "    r=$(($2 % 1000 / 10)); [ $r -ge 10 ] || r=0$r; v=$(($2 / 1000)).$r\n"
        "    for k in $t; do\n"
        "      eval 'o'$k'=$l'$k' p=$pf'$k; eval 'L'$k'='$2' l'$k'='$v\n"
        "      if [ -n \"$p\" ] && [ \"$p\" -lt $2 ]; then eval 'E'$k'=$pf'$k' e'$k'=$pw'$k\n"
        "      else eval 'E'$k'='$2' e'$k'='$v; fi\n"
        "    done\n"
        "    # The new state is written as the staged link q/csv.state, the answers beside it, all dated a\n"
        "    # nanosecond before the state's write (as publish() does); then the state is replaced by it\n"
        "    # (ln -f: a link and a rename), and the answers, the link last, moved into place. Until the\n"
        "    # link moves the old csv.state names the old state: no answer is served.\n"
        "    # (noclobber: a file left in .sh/ by an attempt that died, maybe a link to the state, is\n"
        "    # never written into: the attempt fails, its files are removed, and Python writes)\n"
        "    q=$a/.sh\n"
        "    set -C\n"
        "    pl_write \"$q/csv.state\" \"$q/inv\" \"$q/rb\" \"$q/pl\" &&\n"
        f"      LC_ALL=C '{touch}' -r \"$q/csv.state\" -d '-0.000000001 seconds' \"$q/csv.state\" \"$q/inv\" \\\n"
        "        \"$q/rb\" \"$q/pl\" &&\n"
        f"      LC_ALL=C '{ln}' -f \"$q/csv.state\" \"$s\" || {{\n"
        "      # the state is as it was: nothing of this attempt is left, and Python writes\n"
        f"      LC_ALL=C '{rm}' -f \"$q/csv.state\" \"$q/inv\" \"$q/rb\" \"$q/pl\"\n"
        "      return 1\n"
        "    }\n"
        "    # written: answers not moved (all or some) are not valid (the link names the old state)\n"
        f"    LC_ALL=C '{mv}' -f \"$q/inv\" \"$q/rb\" \"$q/pl\" \"$q/csv.state\" \"$a/\" ||\n"
        f"      LC_ALL=C '{rm}' -f \"$q/csv.state\" \"$q/inv\" \"$q/rb\" \"$q/pl\"\n"
        "    for k in $t; do\n"
        "      eval 'y=$b'$k' z=$o'$k\n"
        "      printf 'Power limit for GPU %s was set to %s W from %s W.\\n' \"$y\" \"$v\" \"$z\"\n"
        "    done\n"
        "    printf 'All done.\\n'\n"
        "  }\n"
    )


#: The ``-q -x`` answer printed by one awk: the first timestamp line the current time (awk's
#: ``strftime``, as ``date`` prints it), every other line as it is. One program instead of ``date``
#: and ``cat`` (2.8 -> 2.0 ms of CPU a call here; an NVIDIA discover makes one).
_AWK_QX = ('index($0, "' + TIMESTAMP_PREFIX + '") == 1 && !d { d = 1; print "' + TIMESTAMP_PREFIX
           + '" strftime("' + _DATE_FORMAT + '") "</timestamp>"; next } { print }')


def launcher(python: str, pkg_parent: str, date: str, cat: str, tools: dict[str, str] | None = None,
             awk: str | None = None) -> bytes:
    """``bin/nvidia-smi``: the shell fast path, then the Python tool (run by ``python -S``).
    ``tools``: :data:`SET_TOOLS`' paths for the shell's ``-pl`` (None: every ``-pl`` runs Python).
    ``awk``: an awk with ``strftime`` (:func:`joulectl.sim.gpu_tree.awk_with_strftime`) prints the ``-q -x`` answer;
    without one, ``date`` and ``cat``."""
    qx, rb, inv = FORMS["qx"], FORMS["rb"], FORMS["inv"]
    for text in (python, pkg_parent, date, cat, awk or "", *qx, *rb, *inv, *(tools or {}).values()):
        if "'" in text or "\n" in text:
            raise ValueError(f"cannot quote {text!r} in the tool script")
    if awk is not None:
        print_qx = f"      LC_ALL=C exec '{awk}' '{_AWK_QX}' \"$a/qx\"\n"
    else:
        print_qx = (
            f"      t=$(LC_ALL=C exec '{date}' '+{_DATE_FORMAT}') && [ -n \"$t\" ] && {{\n"
            "        while IFS= read -r l <&3; do\n"
            "          case $l in\n"
            f"          '{TIMESTAMP_PREFIX}'*) printf '%s%s</timestamp>\\n' '{TIMESTAMP_PREFIX}' \"$t\"\n"
            f"            LC_ALL=C exec '{cat}' <&3;;\n"
            "          esac\n"
            "          printf '%s\\n' \"$l\"\n"
            "        done\n"
            "        exit 1\n"
            f"      }} 3<\"$a/qx\"\n"
        )
    sh = (
        "#!/bin/sh\n"
        "\"true\" '''\\'\n"
        "# fake nvidia-smi rendered by joulectl simulate: reads and writes this node's sys/ and state/.\n"
        "# POSIX sh first: the read-only queries joulectl sends are printed from state/nvsmi-answers/\n"
        "# while valid (joulectl/sim/tools/nvfast.py); everything else runs the Python tool below.\n"
        "case $0 in\n"
        "*/./*|*/../*|*//*|*/.|*/..) ;;\n"
        "/*/*)\n"
        "  s=${0%/*/*}/state/nvml.json a=${0%/*/*}/" + ANSWERS + " f=\n"
        f"  if [ $# = 2 ] && [ \"$1\" = '{qx[0]}' ] && [ \"$2\" = '{qx[1]}' ]; then f=qx g={LINK['qx']}\n"
        f"  elif [ $# = 2 ] && [ \"$1\" = '{rb[0]}' ] && [ \"$2\" = '{rb[1]}' ]; then f=rb g={LINK['rb']}\n"
        f"  elif [ $# = 2 ] && [ \"$1\" = '{inv[0]}' ] && [ \"$2\" = '{inv[1]}' ]; then f=inv g={LINK['inv']}; fi\n"
        "  if [ -n \"$f\" ] && [ \"$s\" -ef \"$a/$g.state\" ] && ! [ \"$s\" -nt \"$a/$f\" ]; then\n"
        "    if [ $f != qx ]; then\n"
        "      # a line a GPU, each ending in a newline: printed by the shell, no process started\n"
        "      {\n"
        "        while IFS= read -r l <&3; do printf '%s\\n' \"$l\" || exit 1; done\n"
        "        exit 0\n"
        "      } 3<\"$a/$f\"\n"
        "    else\n"
        + print_qx +
        "    fi\n"
        "  fi\n"
        + (set_path(tools) + "  if [ $# = 4 ] && [ \"$1\" = -i ] && [ \"$3\" = -pl ] &&\n"
           "    [ -z \"${HWEMU_UNPRIVILEGED-}\" ] && _pl \"$2\" \"$4\"; then exit 0; fi\n" if tools else "")
        + "  ;;\n"
        "esac\n"
        f"exec '{python}' -S \"$0\" \"$@\"\n"
        "'''\n"
    )
    py = (
        "import sys\n"
        f"sys.path.insert(0, {pkg_parent!r})\n"
        "from joulectl.sim.tools.fakesmi import main\n"
        "main('nvidia-smi', __file__)\n"
    )
    return (sh + py).encode()
