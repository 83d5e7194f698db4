#!/usr/bin/env python3
"""Lists the longest C++ function definitions of the project (issue 38: none over 100 lines
outside tests and kernels; house style: a function over ~80 lines asks for a split).

A function's length is the number of lines from the line of its name to the line of its closing
brace, both included (what `ctags --fields=+ne` gives as end - line + 1). Counted: the .cc and .h
files under src/, tools/, python/, bench/ and include/; left out: tests (*_test.cc,
*_test_main.cc, *_testing.h), fuzzers (*_fuzz.cc, fuzz_*.cc) and the kernels (src/kernels/),
whose flattened loops are long on purpose (kernels/isa_builds.h).

    scripts/longest_functions.py               the 10 longest: lines, name, file:line
    scripts/longest_functions.py -n 25         the 25 longest
    scripts/longest_functions.py --max 100     also exit 1 when one is longer than 100 lines
    scripts/longest_functions.py FILE...       only these files (no exclusions applied)

The parser is not a compiler: it drops comments, strings, character literals, raw strings and
the #elif / #else branches of preprocessor conditionals (as ctags does), matches braces, and
takes a brace at namespace or class scope for a function body when it follows a parameter list
and the suffixes a declarator may carry (const, noexcept, override, -> type, a constructor's
initializer list, ...). Lambdas and the members of classes local to a function count as part of
the function that holds them.
"""
import argparse
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DIRS = ("src", "tools", "python", "bench", "include")
EXTS = (".cc", ".h", ".cpp", ".hpp", ".cxx", ".hh", ".inl")
SKIP = re.compile(r"(_test\.cc|_test_main\.cc|_testing\.h|_fuzz\.cc|(^|/)fuzz_[^/]*\.cc)$|^src/kernels/")

TOKEN = re.compile(
    r"""
    (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)")
  | (?P<block>/\*(?:.|\n)*?\*/)
  | (?P<line>//[^\n]*)
  | (?P<str>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*")
  | (?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*')
  | (?P<num>\.?\d(?:[eEpP][+-]|[\w.']|)*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+|\\\n)
  | (?P<pp>\#)
  | (?P<punct>::|->|&&|\.\.\.|.)
    """,
    re.VERBOSE,
)
# A preprocessor directive: to the end of the line, with backslash continuations.
DIRECTIVE = re.compile(r"#(?:[^\n\\]|\\(?:.|\n))*")
DIRECTIVE_WORD = re.compile(r"#\s*(\w+)\s*(.*)", re.S)

# Tokens that may follow a function's parameter list before its body.
SUFFIX_WORDS = {"const", "volatile", "override", "final", "mutable", "constexpr", "&", "&&"}


def tokenize(text):
    """Yields (text, line) for each token that matters: no comment, string or directive text
    (a string becomes the token '"'); the #elif / #else branches of conditionals are dropped."""
    tokens = []
    line = 1
    pos = 0
    at_line_start = True
    # Preprocessor conditionals: one [dropping outside it, a branch was kept] per open #if.
    stack = []
    dropping = False
    n = len(text)
    while pos < n:
        m = TOKEN.match(text, pos)
        kind = m.lastgroup
        if kind == "pp" and at_line_start:
            m = DIRECTIVE.match(text, pos)
            d = DIRECTIVE_WORD.match(m.group(0))
            word, rest = (d.group(1), d.group(2).strip()) if d else ("", "")
            if word in ("if", "ifdef", "ifndef"):
                # #if 0 drops its first branch; any other condition keeps it (as ctags does).
                if_zero = word == "if" and rest.split("//")[0].strip() == "0"
                stack.append([dropping, not if_zero])  # [outer, a branch was kept]
                dropping = dropping or if_zero
            elif word in ("elif", "else") and stack:
                outer, kept = stack[-1]
                dropping = outer or kept
                stack[-1][1] = True
            elif word == "endif" and stack:
                dropping = stack.pop()[0]
            kind = "directive"
        tok = m.group(0)
        if kind in ("nl",):
            at_line_start = True
        elif kind not in ("ws", "block", "line"):
            at_line_start = False
        if not dropping and kind not in ("nl", "ws", "block", "line", "directive"):
            if kind in ("raw", "str", "chr"):
                tokens.append(('"', line))
            else:
                tokens.append((tok, line))
        line += tok.count("\n")
        pos = m.end()
    return tokens


def skip_group(tokens, i, open_tok, close_tok):
    """tokens[i] is open_tok: returns the index after its matching close_tok."""
    depth = 0
    n = len(tokens)
    while i < n:
        t = tokens[i][0]
        if t == open_tok:
            depth += 1
        elif t == close_tok:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def is_declarator_suffix(tokens, i, end):
    """Whether tokens[i:end] (after a parameter list, before a `{`) may end a function
    declarator: qualifiers, noexcept(...), attributes, `-> type`, `requires ...`, or a
    constructor's initializer list."""
    while i < end:
        t = tokens[i][0]
        if t in SUFFIX_WORDS:
            i += 1
        elif t in ("noexcept", "throw", "__attribute__", "alignas"):
            i += 1
            if i < end and tokens[i][0] == "(":
                i = skip_group(tokens, i, "(", ")")
        elif t == "[" and i + 1 < end and tokens[i + 1][0] == "[":
            i = skip_group(tokens, i, "[", "]")
        elif t in ("->", "requires", ":", "try"):
            return True  # a trailing return type, a constraint or an initializer list
        else:
            return False
    return True


def skip_back(tokens, j, head_start, open_, close):
    """The index of the `open_` that matches the `close` at tokens[j] (head_start - 1 if none)."""
    depth = 0
    while j >= head_start:
        if tokens[j][0] == close:
            depth += 1
        elif tokens[j][0] == open_:
            depth -= 1
            if depth == 0:
                return j
        j -= 1
    return j


def function_name(tokens, head_start, paren):
    """The (possibly qualified) name before the parameter list at tokens[paren]."""
    j = paren - 1
    if j < head_start:
        return None, None
    t = tokens[j][0]
    # operator(), operator==, operator new[], ...: walk back to `operator`.
    k = j
    while k >= head_start and k >= j - 3:
        if tokens[k][0] == "operator":
            name = "operator" + "".join(x[0] for x in tokens[k + 1:paren])
            return qualify(tokens, head_start, k, name), tokens[k][1]
        k -= 1
    # a template specialization, f<int>(...); then a macro that produces a name,
    # BENCHMARK_DEFINE_F(...)(...): take the macro
    for close, open_ in ((">", "<"), (")", "(")):
        if t == close:
            j = skip_back(tokens, j, head_start, open_, close) - 1
            if j < head_start:
                return None, None
            t = tokens[j][0]
    if not re.match(r"[A-Za-z_]\w*$", t):
        return None, None
    name = t
    if j - 1 >= head_start and tokens[j - 1][0] == "~":
        name = "~" + name
        j -= 1
    return qualify(tokens, head_start, j, name), tokens[j if name[0] != "~" else j + 1][1]


def qualify(tokens, head_start, j, name):
    """Prepends the A::B:: qualifiers written before tokens[j]."""
    while j - 2 >= head_start and tokens[j - 1][0] == "::" and re.match(r"[A-Za-z_]\w*$", tokens[j - 2][0]):
        name = tokens[j - 2][0] + "::" + name
        j -= 2
    return name


def classify_head(tokens, start, brace):
    """What the `{` at tokens[brace] opens, given the tokens of its declaration from start:
    ("function", name, line, end of the parameters) | ("scope", name) for a namespace or class | ("other",)."""
    i = start
    # Leading template <...> clauses.
    while i < brace and tokens[i][0] == "template" and i + 1 < brace and tokens[i + 1][0] == "<":
        depth = 0
        i += 1
        while i < brace:
            t = tokens[i][0]
            if t == "<":
                depth += 1
            elif t == ">":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            elif t == "(":
                i = skip_group(tokens, i, "(", ")") - 1
            i += 1
    head = i
    # Constructor initializer list: `: a_(x), b_{y} {` -- find where the declarator ends.
    # A function: a top-level (...) whose suffix up to the brace is a declarator's suffix.
    j = head
    while j < brace:
        t = tokens[j][0]
        if t == "operator":  # operator=, operator(), operator[]: the name, then the parameters
            j += 1
            if j < brace and tokens[j][0] == "(":
                j = skip_group(tokens, j, "(", ")")
            while j < brace and tokens[j][0] != "(":
                j += 1
            continue
        if t == "=":
            break  # an initializer: `auto f = [](...) {`, `int x[] = {`
        if t == "(":
            close = skip_group(tokens, j, "(", ")")
            if close <= brace and is_declarator_suffix(tokens, close, brace):
                name, line = function_name(tokens, head, j)
                if name:
                    return ("function", name, line, close)
            j = close
            continue
        j += 1
    words = [t for t, _ in tokens[head:brace]]
    if "namespace" in words or (words[:1] == ["extern"] and words[1:2] == ['"']):
        name = "".join(w for w in words if w not in ("inline", "namespace"))
        return ("scope", name)
    for k, w in enumerate(words):
        if w in ("class", "struct", "union"):
            # The class's name: the last identifier before `:` / `final` / the brace.
            name = ""
            for w2 in words[k + 1:]:
                if w2 in (":", "final", "{"):
                    break
                if re.match(r"[A-Za-z_]\w*$", w2) and w2 not in ("alignas",):
                    name = w2
            return ("scope", name)
        if w in ("enum", "=", "("):
            break
    return ("other",)


def find_functions(text):
    """Returns [(name, first_line, last_line)] for each function definition in text."""
    tokens = tokenize(text)
    out = []
    scopes = []  # per enclosing namespace / class scope: the class's name, or ""
    n = len(tokens)
    i = 0
    start = 0  # first token of the current declaration
    while i < n:
        t = tokens[i][0]
        if t == "(":  # a brace inside parentheses (a default argument, a lambda) opens no scope
            i = skip_group(tokens, i, "(", ")")
            continue
        if t == ";" or (t == ":" and tokens[i - 1][0] in ("public", "protected", "private")):
            start = i + 1
        elif t == "}":
            if scopes:
                scopes.pop()
            start = i + 1
        elif t == "{":
            kind = classify_head(tokens, start, i)
            if kind[0] == "function":
                if is_member_initializer(tokens, kind[3], i):  # `: b_{y}`: not the body yet
                    i = skip_group(tokens, i, "{", "}")
                    continue
                end = skip_group(tokens, i, "{", "}")
                while end < n and tokens[end][0] == "catch":  # a function-try-block's handlers
                    end = skip_group(tokens, end + 1, "(", ")")
                    end = skip_group(tokens, end, "{", "}")
                name = kind[1]
                if scopes and "::" not in name and scopes[-1]:
                    name = scopes[-1] + "::" + name
                out.append((name, kind[2], tokens[end - 1][1]))
                i = end
                start = i
                continue
            if kind[0] == "scope":
                scopes.append(kind[1] if is_class(tokens, start, i) else "")
                start = i + 1
            else:
                i = skip_group(tokens, i, "{", "}")
                start = i
                continue
        i += 1
    return out


def is_member_initializer(tokens, close, brace):
    """Whether the `{` at tokens[brace] initializes a member in a constructor's initializer list
    (`: a_(x), b_{y} {`) rather than opening the body; tokens[close - 1] ends the parameters."""
    words = [x[0] for x in tokens[close:brace]]
    if ":" not in words or "->" in words[:words.index(":")]:
        return False  # no initializer list (a `:` after `->` is part of the return type)
    prev = tokens[brace - 1][0]
    return prev not in (")", "}") and prev not in SUFFIX_WORDS


def is_class(tokens, start, brace):
    return any(tokens[k][0] in ("class", "struct", "union") for k in range(start, brace))


def project_files():
    for base in DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, base)):
            dirnames.sort()
            for f in sorted(files):
                path = os.path.relpath(os.path.join(dirpath, f), ROOT)
                if f.endswith(EXTS) and not SKIP.search(path):
                    yield path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=10, help="how many to list (default 10)")
    p.add_argument("--max", type=int, default=None, metavar="L",
                   help="exit 1 when a function is longer than L lines (listing every such one)")
    p.add_argument("files", nargs="*", help="files to measure instead of the project's")
    args = p.parse_args()
    rows = []
    for path in args.files or project_files():
        full = path if os.path.isabs(path) else os.path.join(ROOT, path)
        if args.files and not os.path.exists(full):
            full = path
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name, first, last in find_functions(text):
            rows.append((last - first + 1, name, path, first))
    rows.sort(key=lambda r: (-r[0], r[2], r[3]))
    for length, name, path, line in rows[:args.n]:
        print(f"{length:5d}  {name}  {path}:{line}")
    if args.max is not None:
        over = [r for r in rows if r[0] > args.max]
        for length, name, path, line in over:
            print(f"longest_functions: {path}:{line}: {name} is {length} lines (over {args.max})",
                  file=sys.stderr)
        if over:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
