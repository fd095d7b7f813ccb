#!/usr/bin/env python3
"""`specgen chat` as a user drives it, on the bundled pair on the CPU: piped turns (multi-line turns,
/stats, /reset, /help, unknown commands, /quit, EOF), the KV cache kept across turns, a context that
fills, and on a pseudo-terminal the colours and Ctrl-C.

With --gpu instead: chat on the GPU (--device cuda) gives the CPU's greedy text, turn for turn.

Every wait on the pseudo-terminal is for an event (a pattern on stderr, bytes on stdout, the process's
exit), never for a stretch of wall-clock time, so the check runs as well under the sanitizers'
slowdown (scripts/test --asan); FAILSAFE only bounds a hung binary, far above any honest run, and
ctest's timeout bounds the whole.

usage: chat_check.py SPECGEN SOURCE_DIR [--gpu]
"""
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

failures = []
FAILSAFE = 1200  # seconds: a binary that hangs, not a slow one


def check(cond, what):
    if not cond:
        failures.append(what)


def chat(specgen, args, stdin, timeout=FAILSAFE):
    run = subprocess.run([specgen, "chat"] + args, input=stdin, capture_output=True, text=True, timeout=timeout)
    return run.returncode, run.stdout, run.stderr


SUMMARY = re.compile(r"^\[(\d+) tokens, [\d.]+ tokens/s.*, (\d+) prompt tokens prefilled\]$", re.M)


def piped(specgen, pair):
    greedy = pair + ["-n", "16", "--temp", "0"]
    # Five turns (one continued with a backslash, one a """ block), commands in between; /quit ends it.
    stdin = ('def add(a, b):\\\n    """Add."""\n/stats\n/foo bar\nimport os\n"""\nclass A:\n\n    pass\n"""\n'
             '/help\n/reset\nclass B:\n/quit\nnever answered\n')
    rc, out, err = chat(specgen, greedy + ["--stats", "json"], stdin)
    check(rc == 0, f"piped: exit {rc}: {err[-500:]}")
    replies = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    check(len(replies) == 4, f"piped: {len(replies)} JSON replies for 4 turns (a continued line and a block "
                             f"are one turn each, /quit ends the session): {out[-500:]!r}")
    check("conversation: 1 reply," in err, f"piped: /stats after one reply: {err[-800:]!r}")
    check("conversation:" not in out and "commands:" not in out, "piped: /stats or /help text on stdout")
    check("unknown command /foo" in err, "piped: /foo not refused")
    check("/reset" in err and "conversation reset" in err, "piped: /help or /reset not on stderr")

    # The default --stats text: a one-line summary per reply on stderr, none on stdout; the second turn
    # prefills only what the kept cache lacks, fewer tokens than the first turn's long system prompt.
    system = "You write Python for the standard library: short functions, docstrings, type hints, no prints."
    rc, out, err = chat(specgen, greedy + ["--system", system], "def f(x):\nimport re\n")
    check(rc == 0, f"summary: exit {rc}: {err[-500:]}")
    fed = [int(m.group(2)) for m in SUMMARY.finditer(err)]
    check(len(fed) == 2, f"summary: {len(fed)} summary lines on stderr for 2 turns: {err[-500:]!r}")
    check(not SUMMARY.search(out), "summary: a summary line on stdout")
    if len(fed) == 2:
        check(fed[1] < fed[0], f"summary: turn 2 prefilled {fed[1]} tokens, turn 1 {fed[0]}: the cache was not kept")
    # Piped replies are separated by a blank line, and greedy chat repeats itself exactly.
    rc2, out2, _ = chat(specgen, greedy + ["--system", system], "def f(x):\nimport re\n")
    check(out2 == out and out.endswith("\n\n"), f"summary: reruns differ or replies not separated: {out!r} {out2!r}")

    # A context that fills: the oldest exchanges go (said on stderr), the chat goes on; a message that
    # cannot fit even alone is refused with a message, and the chat still exits 0.
    turns = "".join(f"def f{i}(x):\n" for i in range(8))
    rc, out, err = chat(specgen, pair + ["-c", "96", "-n", "24", "--temp", "0", "--ignore-eos", "--stats", "json",
                                         "--system", "Python."], turns + ("x = 1 " * 200) + "\nlast\n")
    check(rc == 0, f"full context: exit {rc}: {err[-500:]}")
    check("context full: dropped the oldest" in err and "system prompt stays" in err,
          f"full context: no drop notice: {err[-500:]!r}")
    check("fills the context" in err, f"full context: the oversized message was not refused: {err[-500:]!r}")
    check(len([l for l in out.splitlines() if l.startswith("{")]) == 9, "full context: not every fitting turn answered")

    rc, out, err = chat(specgen, pair + ["--chat-template", "vicuna"], "")
    check(rc == 1 and "--chat-template must be one of" in err, f"--chat-template vicuna: exit {rc}: {err!r}")
    rc, out, err = chat(specgen, pair + ["--color", "sometimes"], "")
    check(rc == 1 and "--color must be auto, always or never" in err, f"--color sometimes: exit {rc}: {err!r}")
    # --color off is never's word (issue 47), and the reasoning display takes its four values only.
    rc, out, err = chat(specgen, greedy + ["--color", "off"], "def add(a, b):\n")
    check(rc == 0 and out.strip() != "" and "\x1b[" not in out, f"--color off: exit {rc}: {out!r} {err[-300:]!r}")
    rc, out, err = chat(specgen, pair + ["--think", "sometimes"], "")
    check(rc != 0 and "--think" in err and "sometimes" in err, f"--think sometimes: exit {rc}: {err!r}")
    # Reasoning where the reply has no colour (issue 47): this message makes the bundled target write
    # a <think> that it never closes. --think show prints it; piped (no colour, --think auto) it and
    # all after it is hidden, the text before it kept; coloured (--color always) it is dimmed instead.
    mimic = 's = "<think>x</think> done" s = "<think>x</think> done" s = "<think>x</think> done"\n'
    think_args = pair + ["-n", "40", "--temp", "0", "--stats", "none"]
    _, shown, _ = chat(specgen, think_args + ["--think", "show"], mimic)
    if "<think>" in shown:
        rc, hidden, err = chat(specgen, think_args, mimic)
        check(rc == 0 and hidden == shown[:shown.find("<think>")] + "\n\n",
              f"--think auto, piped: {hidden!r}, expected the text before <think> of {shown!r}")
        _, dimmed, _ = chat(specgen, think_args + ["--color", "always"], mimic)
        check("<think>" in dimmed and "\x1b[2m" in dimmed, f"--color always: reasoning not shown dim: {dimmed!r}")
        _, hidden_colored, _ = chat(specgen, think_args + ["--color", "always", "--think", "hide"], mimic)
        check("<think>" not in hidden_colored, f"--think hide: {hidden_colored!r}")
    else:  # a build whose greedy text differs in a near tie: the unit tests (ThinkHiderTest) still hold
        print(f"note: the bundled target wrote no <think> here ({shown[:80]!r}); reasoning display not checked")
    # The bundled pair's template has no thinking switch: --reasoning off is refused, naming it.
    rc, out, err = chat(specgen, pair + ["--reasoning", "off"], "hi\n")
    check(rc == 1 and "has no thinking switch" in err, f"--reasoning off on the tiny pair: exit {rc}: {err!r}")
    rc, out, err = chat(specgen, pair + ["-n", "8", "--temp", "0", "--chat-template", "llama3"], "hello\n")
    check(rc == 0 and out.strip() != "", f"--chat-template llama3: exit {rc}: {err[-300:]!r}")


class PtyChat:
    """specgen chat with stdin and stdout on a pseudo-terminal (stderr a pipe)."""

    def __init__(self, specgen, args):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([specgen, "chat"] + args, stdin=slave, stdout=slave,
                                     stderr=subprocess.PIPE, close_fds=True)
        os.close(slave)
        self.out, self.err = b"", b""

    def send(self, text):
        os.write(self.master, text.encode())

    def read_until(self, done, timeout=FAILSAFE):
        """Reads stdout and stderr as they come until done(self) holds; False when both streams end
        (the process exited) or `timeout` (FAILSAFE by default) passes first. select() blocks until
        there is data: no polling interval, no deadline that a slow build could miss."""
        end = time.time() + timeout
        open_fds = [self.master, self.proc.stderr]
        while not done(self):
            if not open_fds or time.time() > end:
                return False
            ready, _, _ = select.select(open_fds, [], [], end - time.time())
            for fd in ready:
                try:
                    data = os.read(fd if fd == self.master else fd.fileno(), 65536)
                except OSError:  # the pty's other end closed
                    data = b""
                if not data:
                    open_fds.remove(fd)
                elif fd == self.master:
                    self.out += data
                else:
                    self.err += data
        return True

    def read_until_err(self, pattern, timeout=FAILSAFE):
        """read_until `pattern` (bytes regex) appears in stderr."""
        return self.read_until(lambda c: re.search(pattern, c.err) is not None, timeout)

    def close(self):
        # Ctrl-D: EOF on the terminal, typed as a person would, once the line editor reads again (a
        # Ctrl-D that arrives while the terminal is between lines, in cooked mode, is lost to it).
        time.sleep(1)
        self.send("\x04")
        try:
            rc = self.proc.wait(timeout=FAILSAFE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        self.err += self.proc.stderr.read()
        os.close(self.master)
        return rc


def terminal(specgen, pair):
    greedy = pair + ["-n", "48", "--temp", "0", "--draft-max", "3", "--draft-fixed"]
    for color, want in (("auto", True), ("never", False)):
        c = PtyChat(specgen, greedy + ["--color", color])
        c.send("def add(a, b):\n")
        answered = c.read_until_err(rb"tokens per pass")
        rc = c.close()
        check(answered and rc == 0, f"pty --color {color}: answered {answered}, exit {rc}: {c.err[-300:]!r}")
        colored = b"\x1b[32m" in c.out and b"\x1b[36m" in c.out  # draft green and target cyan
        check(colored == want, f"pty --color {color}: colours {'missing' if want else 'present'}: {c.out[-300:]!r}")
    rc, out, err = chat(specgen, greedy + ["--color", "auto"], "def add(a, b):\n")
    check(rc == 0 and "\x1b[" not in out, "piped --color auto: escape codes in the output")
    rc, out, err = chat(specgen, greedy + ["--color", "always"], "def add(a, b):\n")
    check("\x1b[32m" in out, "piped --color always: no colours")

    # A paste (bracketed, as terminals send it) whose last line waits for Enter, then Enter: one turn,
    # one answer, and no empty turn after it (/stats counts the replies).
    c = PtyChat(specgen, greedy + ["--color", "never"])
    c.send("\x1b[200~def add(a, b):\n    return a + b\x1b[201~")
    time.sleep(0.5)
    c.send("\n")
    answered = c.read_until_err(rb"tokens per pass")
    time.sleep(0.5)
    c.send("/stats\n")
    counted = c.read_until_err(rb"conversation: \d+ repl")
    rc = c.close()
    err = c.err.decode(errors="replace")
    check(answered and counted and rc == 0, f"paste then Enter: answered {answered}, exit {rc}: {err[-400:]!r}")
    check("conversation: 1 reply," in err, f"paste then Enter: not exactly one turn: {err[-600:]!r}")

    # Line editing and history (libedit): "/rset", Ctrl-A, Ctrl-F twice, "e" makes "/reset"; Up and
    # Enter run it again; Ctrl-R finds it by "res". Keys are sent once the editor reads (a second
    # after the last answer: between lines the terminal is back in cooked mode and would echo them).
    c = PtyChat(specgen, greedy + ["--color", "never"])
    c.read_until_err(rb"chat with", timeout=60)
    time.sleep(1)
    c.send("/rset\x01\x06\x06e\r")
    first = c.read_until_err(rb"\(conversation reset\)", timeout=30)
    time.sleep(1)
    c.send("\x1b[A\r")
    second = c.read_until_err(rb"(?s)(\(conversation reset\).*){2}", timeout=30)
    time.sleep(1)
    c.send("\x12res")
    time.sleep(0.5)
    c.send("\r")
    third = c.read_until_err(rb"(?s)(\(conversation reset\).*){3}", timeout=5)
    if not third:  # libedit's search may take one Enter to end it and one to accept the line
        c.send("\r")
        third = c.read_until_err(rb"(?s)(\(conversation reset\).*){3}", timeout=30)
    rc = c.close()
    err = c.err.decode(errors="replace")
    check(first and rc == 0, f"editing: Ctrl-A / Ctrl-F did not make /reset: {err[-400:]!r} {c.out[-300:]!r}")
    check(second, f"history: Up did not bring /reset back: {err[-400:]!r} {c.out[-300:]!r}")
    check(third, f"history: Ctrl-R did not find /reset: {err[-400:]!r} {c.out[-300:]!r}")
    check("unknown command" not in err and "tokens/s" not in err,
          f"editing: a mangled line reached chat: {err[-400:]!r}")

    # Ctrl-C (SIGINT) during a long answer stops it; the session goes on and answers the next turn.
    c = PtyChat(specgen, pair + ["-n", "100000", "-c", "4096", "--temp", "0", "--ignore-eos", "--color", "never"])
    c.send("def long(x):\n")
    # The answer is under way once some of it is on the terminal, however long loading took.
    started = c.read_until(lambda c: len(c.out) >= 200)
    check(started, f"Ctrl-C: no answer began: {c.err[-500:]!r}")
    c.proc.send_signal(signal.SIGINT)
    stopped = c.read_until_err(rb"\(stopped\)")
    c.send("import os\n")
    answered = c.read_until_err(rb"(?s)\(stopped\).*tokens/s.*tokens/s")
    rc = c.close()
    check(stopped, f"Ctrl-C: the answer was not stopped: {c.err[-500:]!r}")
    first = SUMMARY.search(c.err.decode(errors="replace"))
    check(first is not None and int(first.group(1)) < 3000,
          f"Ctrl-C: the answer ran on to {first.group(1) if first else '?'} tokens before stopping")
    check(answered, f"Ctrl-C: the next turn was not answered: {c.err[-500:]!r}")
    check(rc == 0, f"Ctrl-C: exit {rc}")


def gpu_matches_cpu(specgen, models):
    pair = ["-m", os.path.join(models, "tiny-target"), "-md", os.path.join(models, "tiny-draft")]
    args = ["-n", "48", "--temp", "0", "--stats", "none", "--system", "You write Python."]
    stdin = "def add(a, b):\nimport os\n/reset\nclass A:\n"
    outs = {}
    for device in ("cpu", "cuda"):
        rc, out, err = chat(specgen, pair + ["--device", device] + args, stdin)
        check(rc == 0, f"--device {device}: exit {rc}: {err[-500:]}")
        outs[device] = out
    check(outs["cpu"] == outs["cuda"] and outs["cpu"].strip(),
          f"greedy chat on the GPU differs from the CPU's:\ncpu:  {outs['cpu']!r}\ncuda: {outs['cuda']!r}")


def main():
    specgen, source = sys.argv[1], os.path.abspath(sys.argv[2])
    models = os.path.join(source, "models")
    if "--gpu" in sys.argv[3:]:
        gpu_matches_cpu(specgen, models)
    else:
        pair = ["-m", os.path.join(models, "tiny-target"), "-md", os.path.join(models, "tiny-draft"), "--device", "cpu"]
        piped(specgen, pair)
        terminal(specgen, pair)
    for f in failures:
        print("FAIL:", f)
    print("chat_check:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
