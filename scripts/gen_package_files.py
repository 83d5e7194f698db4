#!/usr/bin/env python3
"""Generated files of the Debian package (CMakeLists.txt, CPack DEB; docs/package.md).

    gen_package_files.py man CLI OUT.1.gz          the man page, from CLI's own --help output
    gen_package_files.py completion CLI OUT        the bash completion script, from the same
    gen_package_files.py pyc DEST_DIR OUT_DIR SRC.py ...
                                                   byte-compiled SRC.py files (checked-hash pycs,
                                                   OUT_DIR/<name>.cpython-XY.pyc) whose source
                                                   path is DEST_DIR/<name>.py

The man page and the completion list every subcommand (`leanemb --help`, recursively: `ckpt
verify`, ...) with its options as CLI11 prints them, so they follow the CLI without a second
copy of its options. The pycs are shipped so that importing the installed package never writes
__pycache__ into /usr/lib/python3/dist-packages (`apt remove` then leaves nothing behind).
"""
import gzip
import io
import os
import py_compile
import re
import subprocess
import sys

COL = 30  # CLI11's option column width (names and type on the left, description from here)


def run_help(cli, path):
    # argv[0] "leanemb": the usage lines then name the command, not the build tree's path.
    r = subprocess.run(["leanemb", *path, "--help"], executable=cli, capture_output=True, text=True,
                       env={**os.environ, "LC_ALL": "C"})
    if r.returncode != 0:
        sys.exit("gen_package_files: %s %s --help exited %d: %s" % (cli, " ".join(path), r.returncode, r.stderr))
    return r.stdout


class Command:
    def __init__(self, path, text):
        self.path = path            # [] for the top level, ["ckpt", "verify"], ...
        self.description = ""       # the first line (CLI11 prints the app's description first)
        self.usage = ""
        self.options = []           # (names, value type or "", description)
        self.positionals = []       # (name, type, description)
        self.subcommands = []       # (name, description)
        self.footer = []
        self._parse(text)

    def _parse(self, text):
        lines = text.rstrip("\n").split("\n")
        section = "head"
        for line in lines:
            if line.startswith("Usage: "):
                self.usage = re.sub(r"^Usage: \S+", "leanemb", line)
                section = "usage"
                continue
            if section == "head":
                if line.strip():
                    self.description = (self.description + " " + line.strip()).strip()
                continue
            if line in ("Options:", "Positionals:", "Subcommands:"):
                section = line[:-1].lower()
                continue
            if not line.strip():
                if section in ("options", "positionals", "subcommands"):
                    section = "gap"
                continue
            if section in ("options", "positionals", "subcommands"):
                if line.startswith(" " * COL):  # a description on its own line, or a continuation
                    items = {"options": self.options, "positionals": self.positionals,
                             "subcommands": self.subcommands}[section]
                    last = items[-1]
                    items[-1] = last[:-1] + ((last[-1] + " " + line.strip()).strip(),)
                    continue
                left, desc = (line[:COL], line[COL:]) if len(line) > COL and line[COL - 1] == " " else (line, "")
                left, desc = left.strip(), desc.strip()
                if section == "subcommands":
                    self.subcommands.append((left, desc))
                    continue
                m = re.match(r"^(\S+)\s*(.*)$", left)
                names, rest = m.group(1), m.group(2)
                if section == "options":
                    self.options.append((names, clean_type(rest), desc))
                else:
                    self.positionals.append((names, clean_type(rest), desc))
                continue
            # after the listed sections: the footer (exit codes, notes)
            section = "footer"
            self.footer.append(line)


def clean_type(t):
    # "DIR:NONEMPTY REQUIRED" -> "DIR (required)"; "N:NONEMPTY=13" -> "N=13";
    # "FLOAT:FLOAT in [0 - 1]=0" -> "FLOAT=0"
    req = " REQUIRED" in t or t == "REQUIRED"
    t = t.replace(" REQUIRED", "").replace("REQUIRED", "")
    t = re.sub(r":[A-Z_]+( in \[[^\]]*\])?( AND [A-Z_]+)*", "", t)
    t = t.strip()
    return (t + " (required)").strip() if req else t


def collect(cli):
    out = []

    def walk(path):
        c = Command(path, run_help(cli, path))
        out.append(c)
        for name, _ in c.subcommands:
            walk(path + [name])

    walk([])
    return out


def roff(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    # a line starting with . or ' is a request in roff
    return re.sub(r"^([.'])", r"\\&\1", s, flags=re.M)


def man_page(cmds, version):
    top = cmds[0]
    o = io.StringIO()
    o.write('.TH LEANEMB 1 "" "%s" "User Commands"\n' % roff(version))
    o.write(".SH NAME\nleanemb \\- %s\n" % roff(top.description.split(": ", 1)[-1]))
    o.write(".SH SYNOPSIS\n")
    for c in cmds[1:]:
        if not c.subcommands:
            o.write(".B %s\n.br\n" % roff(c.usage.strip()))
    o.write(".SH DESCRIPTION\n%s\n" % roff(re.sub(r"^leanemb: ", "", top.description)))
    o.write(".PP\nThe documentation of every command and config key is installed in\n"
            ".IR /usr/share/doc/leanemb/ ;\nthe docs/ paths below are relative to it.\n")
    o.write(".SH OPTIONS\n")
    for names, t, desc in top.options:
        o.write(".TP\n.B %s\n%s\n" % (roff(names + (" " + t if t else "")), roff(desc)))
    o.write(".SH COMMANDS\n")
    for c in cmds[1:]:
        o.write(".SS %s\n" % roff("leanemb " + " ".join(c.path)))
        o.write("%s\n.PP\n.B %s\n" % (roff(c.description), roff(c.usage)))
        if c.subcommands:
            o.write(".PP\nSubcommands: %s.\n" % roff(", ".join(n for n, _ in c.subcommands)))
        for names, t, desc in c.positionals:
            o.write(".TP\n.I %s\n%s\n" % (roff(names), roff(desc)))
        for names, t, desc in c.options:
            if names == "-h,--help":
                continue
            o.write(".TP\n.B %s\n%s\n" % (roff(names.replace(",", ", ") + (" " + t if t else "")), roff(desc)))
        notes = [ln for ln in c.footer if ln.strip()]
        # the exit code table is every command's footer: once, under EXIT STATUS
        if notes and not notes[0].startswith("Exit codes"):
            cut = next((i for i, ln in enumerate(notes) if ln.startswith("Exit codes")), len(notes))
            o.write(".PP\n%s\n" % roff(" ".join(ln.strip() for ln in notes[:cut])))
    exit_lines = [ln for ln in top.footer if ln.strip()][1:]
    if exit_lines:
        o.write(".SH EXIT STATUS\n")
        for ln in exit_lines:
            m = re.match(r"^\s+(\d+)\s+(.*)$", ln)
            if m and not ln.startswith("     "):
                o.write(".TP\n.B %s\n%s\n" % (m.group(1), roff(m.group(2))))
            else:
                o.write("%s\n" % roff(ln.strip()))
    o.write(".SH FILES\n.TP\n.I /usr/share/doc/leanemb/\nREADME.md and the documentation (train.md: every config key).\n"
            ".TP\n.I /usr/lib/python3/dist-packages/leanemb/\nthe Python package (import leanemb.torch).\n")
    o.write(".SH SEE ALSO\n.BR mpirun (1)\n")
    return o.getvalue()


def completion(cmds):
    by_path = {" ".join(c.path): c for c in cmds}
    o = io.StringIO()
    o.write("# bash completion for leanemb, generated from its --help output (scripts/gen_package_files.py)\n")
    o.write("_leanemb() {\n  local cur prev words cword\n  _init_completion || return\n")
    o.write("  local i cmd=\"\"\n")
    o.write("  for ((i = 1; i < cword; i++)); do\n")
    o.write("    case \"${cmd:+$cmd }${words[i]}\" in\n")
    o.write("      %s) cmd=\"${cmd:+$cmd }${words[i]}\" ;;\n" % "|".join('"%s"' % p for p in sorted(by_path) if p))
    o.write("    esac\n  done\n")
    o.write("  case \"$cmd\" in\n")
    for p, c in by_path.items():
        opts = []
        file_opts, dir_opts, value_opts = [], [], []
        for names, t, _ in c.options:
            for n in names.split(","):
                opts.append(n)
                if t and not t.startswith("="):
                    ty = t.split("=")[0].split()[0]
                    (dir_opts if ty == "DIR" else file_opts if ty == "FILE" else value_opts).append(n)
        words = " ".join(n for n, _ in c.subcommands)
        o.write("    \"%s\")\n" % p)
        if file_opts or dir_opts or value_opts:
            o.write("      case \"$prev\" in\n")
            if file_opts:
                o.write("        %s) _filedir; return ;;\n" % "|".join(file_opts))
            if dir_opts:
                o.write("        %s) _filedir -d; return ;;\n" % "|".join(dir_opts))
            if value_opts:
                o.write("        %s) return ;;\n" % "|".join(value_opts))
            o.write("      esac\n")
        positional_dir = any(t.startswith("DIR") or n.endswith("DIR") for n, t, _ in c.positionals)
        o.write("      if [[ \"$cur\" == -* ]]; then\n        COMPREPLY=($(compgen -W \"%s\" -- \"$cur\"))\n" % " ".join(opts))
        if words:
            o.write("      else\n        COMPREPLY=($(compgen -W \"%s\" -- \"$cur\"))\n" % words)
        elif positional_dir:
            o.write("      else\n        _filedir -d\n")
        o.write("      fi ;;\n")
    o.write("  esac\n}\ncomplete -F _leanemb leanemb\n")
    return o.getvalue()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    mode = sys.argv[1]
    if mode in ("man", "completion") and len(sys.argv) == 4:
        cli, out = sys.argv[2], sys.argv[3]
        cmds = collect(cli)
        if mode == "man":
            version = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout.strip()
            data = man_page(cmds, version).encode()
            with open(out, "wb") as f:  # mtime 0, no file name: the same bytes every build
                with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as g:
                    g.write(data)
        else:
            with open(out, "w") as f:
                f.write(completion(cmds))
        return
    if mode == "pyc" and len(sys.argv) >= 5:
        dest, outdir, srcs = sys.argv[2], sys.argv[3], sys.argv[4:]
        os.makedirs(outdir, exist_ok=True)
        tag = sys.implementation.cache_tag
        for s in srcs:
            name = os.path.splitext(os.path.basename(s))[0]
            py_compile.compile(s, cfile=os.path.join(outdir, "%s.%s.pyc" % (name, tag)),
                               dfile=os.path.join(dest, os.path.basename(s)), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
