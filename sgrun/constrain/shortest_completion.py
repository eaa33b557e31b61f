"""How many tokens the shortest valid end of the output needs, from any state of a lazy DFA.

Three layers, each exact for what it measures:

1. bytes: per NFA state, the fewest bytes to the end of its fragment (a call edge costs the
   called fragment's shortest string; a counted repeat `lo` of them), computed fragment by
   fragment, callees first, iterating within recursive groups; a DFA state's distance is the
   least over its configurations of that plus what each return frame on the stack still needs;
2. a witness: the byte string itself, walked through the DFA (each byte to a state one byte
   closer to the end), so it is a real path whatever the distances assumed;
3. tokens: the fewest vocabulary tokens that spell the witness (dynamic programming over the
   token trie), plus one for EOS where the witness ends in a state that could go on (after a
   tool call: another one may follow), so the output finishes as "stop". An accepting state
   itself needs 0: cut there (finish "length") the output is valid as it stands, and free text
   that may end anywhere is not closed one token early instead of reporting that it ran out.

The token count is an upper bound of the true shortest (another byte string may tokenize
shorter), and a *consistent* one: computing a state's count also records, for every state on
its witness at a token boundary, the count that remains there and the token that continues the
witness. So from every state with count n there is a token to a state with count <= n - 1,
which is what lets budget.py steer a request to a valid end in exactly the tokens it has.
"""

from __future__ import annotations

import heapq
import threading
import weakref

from sgrun.constrain.token_spelling import vocab_spelling

INF = float("inf")
MAX_WITNESS_BYTES = 1 << 16
# Preferred filler bytes when several classes are equally short (a string's minLength filler):
# ones that tokenize well.
_PREFERRED = b"a0 e"


class NfaDistances:
    """Per NFA state: fewest bytes to the end of its own fragment. `computed`: the (dist,
    shortest) lists from the C++ automaton (NativeLazyDFA.nfa_distances: the same passes, the
    same values), or None to compute them here (the Python automaton; the tests' reference)."""

    def __init__(self, nfa, computed: tuple[list[float], list[float]] | None = None):
        self.nfa = nfa
        if computed is not None:
            self.dist, self.shortest = computed
            return
        n = len(nfa.edges)
        self.dist: list[float] = [INF] * n
        self.shortest: list[float] = [INF] * len(nfa.frag_start)
        # Reverse edges, once for the whole NFA (fragments never share an edge): (source, bytes
        # consumed) and, per return state, the calls that return there (source, fragment, lo).
        self._back: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self._back_calls: dict[int, list[tuple[int, int, int]]] = {}
        members, callees = self._fragments()
        for group in _callee_first_groups(callees):
            recursive = len(group) > 1 or group[0] in callees[group[0]]
            while True:   # a recursive group: iterate until its fragments' lengths settle
                changed = False
                for f in group:
                    self._fragment_distances(f, members[f])
                    got = self.dist[nfa.frag_start[f]]
                    if got < self.shortest[f]:
                        self.shortest[f] = got
                        changed = True
                if not (changed and recursive):
                    break

    def _fragments(self) -> tuple[list[list[int]], list[set[int]]]:
        nfa = self.nfa
        back, back_calls = self._back, self._back_calls
        members: list[list[int]] = []
        callees: list[set[int]] = []
        for f in range(len(nfa.frag_start)):
            start = nfa.frag_start[f]
            seen = {start, nfa.frag_end[f]}
            todo = [start]
            called: set[int] = set()
            while todo:
                s = todo.pop()
                for _, t in nfa.edges[s]:
                    back[t].append((s, 1))
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
                for t in nfa.eps[s]:
                    back[t].append((s, 0))
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
                for call in nfa.calls[s]:
                    fid, ret = call[0], call[1]
                    called.add(fid)
                    back_calls.setdefault(ret, []).append((s, fid, call[2] if len(call) > 2 else 1))
                    if ret not in seen:
                        seen.add(ret)
                        todo.append(ret)
            members.append(list(seen))
            callees.append(called)
        return members, callees

    def _fragment_distances(self, f: int, states: list[int]) -> None:
        """Backward Dijkstra from the fragment's end over its own edges."""
        dist, back, back_calls, shortest = self.dist, self._back, self._back_calls, self.shortest
        for s in states:
            dist[s] = INF
        end = self.nfa.frag_end[f]
        dist[end] = 0
        heap = [(0, end)]
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            d, s = pop(heap)
            if d > dist[s]:
                continue
            for p, w in back[s]:
                nd = d + w
                if nd < dist[p]:
                    dist[p] = nd
                    push(heap, (nd, p))
            calls = back_calls.get(s)
            if calls:
                for p, fid, lo in calls:
                    nd = d + (0 if lo == 0 else lo * shortest[fid])
                    if nd < dist[p]:
                        dist[p] = nd
                        push(heap, (nd, p))

    def stack_cost(self, stk, memo: dict) -> float:
        """Bytes the return frames still need after the current fragment ends."""
        total = 0.0
        frames = []
        while stk is not None:
            got = memo.get(id(stk))
            if got is not None:
                total = got
                break
            frames.append(stk)
            stk = stk[2]
        for frame in reversed(frames):
            top = frame[0]
            if type(top) is int:
                total += self.dist[top]
            else:
                fid, ret, lo, _hi, k = top
                total += max(0, lo - k) * self.shortest[fid] + self.dist[ret]
            memo[id(frame)] = total
        return total


def _callee_first_groups(callees: list[set[int]]) -> list[list[int]]:
    """Strongly connected groups of the call graph, callees before callers (iterative Tarjan)."""
    n = len(callees)
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, iter(sorted(callees[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, iter(sorted(callees[w]))))
                    advanced = True
                    break
                if on[w]:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    group.append(w)
                    if w == v:
                        break
                out.append(group)
    return out


class ShortestCompletion:
    """Token counts of the shortest valid endings, per DFA state of one AutomatonConstraint
    (shared by all its requests; every method is safe to call from several threads)."""

    def __init__(self, constraint):
        # (weakly: it is stored on the constraint, and a strong reference back made a cycle; see
        # budget.BudgetSteering)
        self._constraint = weakref.ref(constraint)
        self.dfa = constraint.dfa
        self.spelling = vocab_spelling(constraint.table)
        native = getattr(self.dfa, "nfa_distances", None)  # (the C++ automaton: 0.65 against 10.3 ms on average over the real-world-like corpus)
        self.nfa_dist = NfaDistances(self.dfa.nfa, native() if native is not None else None)
        self._bytes: dict[int, float] = {}
        self._tokens: dict[int, int] = {}        # state -> tokens its (best known) ending needs
        self._next: dict[int, int] = {}          # state -> the token that continues that ending
        self._stack_memo: dict = {}
        self._lock = threading.RLock()

    @property
    def constraint(self):
        return self._constraint()

    # --- bytes ------------------------------------------------------------------------------
    def byte_distance(self, state: int) -> float:
        """Fewest bytes from `state` to an accepting state (inf if none)."""
        got = self._bytes.get(state)
        if got is None:
            if state == 0:
                got = INF
            elif self.dfa.accepting[state]:
                got = 0
            else:
                nd = self.nfa_dist
                with self._lock:
                    got = min((nd.dist[s] + nd.stack_cost(stk, self._stack_memo)
                               for s, stk in self.dfa._sets[state]), default=INF)
            self._bytes[state] = got
        return got

    def witness(self, state: int) -> tuple[bytes, list[int]]:
        """The shortest ending's bytes from `state`, and the DFA states after each of its bytes."""
        dfa = self.dfa
        out = bytearray()
        states = []
        q = state
        while not dfa.accepting[q]:
            if len(out) >= MAX_WITNESS_BYTES:
                raise _NoEnding
            row = dfa.row(q).tolist()
            best, pick = INF, None
            for c, t in enumerate(row):
                if t == 0:
                    continue
                d = self.byte_distance(t)
                if d < best or (d == best and pick is not None and _nicer(dfa, c, pick[0])):
                    best, pick = d, (c, t)
            if pick is None or best == INF:
                raise _NoEnding
            out.append(_byte_of(dfa, pick[0]))
            q = pick[1]
            states.append(q)
        return bytes(out), states

    # --- tokens -----------------------------------------------------------------------------
    def tokens_needed(self, state: int) -> float:
        """Tokens of the shortest ending known from `state` (0 where it accepts; an EOS counted
        where the ending could go on): an upper bound of the true shortest; inf where none."""
        got = self._tokens.get(state)
        if got is not None:
            return got
        with self._lock:
            got = self._tokens.get(state)
            if got is None:
                got = self._compute(state)
        return got

    def next_token(self, state: int) -> int | None:
        """The token that continues the ending tokens_needed(state) counted (None at its end)."""
        self.tokens_needed(state)
        return self._next.get(state)

    def _compute(self, state: int) -> float:
        c = self.constraint
        try:
            data, after = self.witness(state)
        except _NoEnding:
            self._tokens[state] = INF
            return INF
        if not data:
            self._tokens[state] = 0
            return 0
        tokens = self.spelling.fewest_tokens(data)
        if not tokens:
            self._tokens[state] = INF
            return INF
        # Record the count left at every token boundary of the witness (a shorter count another
        # witness found there stays: it has its own continuation recorded).
        # Leaving structure for an end that could go on (another call, free text) keeps one token
        # for the EOS that finishes it as "stop"; an end nothing can follow finishes by itself.
        eos = 1 if c.can_continue(after[-1]) else 0
        q, pos = state, 0
        for i, tok in enumerate(tokens):
            left = len(tokens) + eos - i
            if self._tokens.get(q, INF) > left:
                self._tokens[q] = left
                self._next[q] = tok
            pos += len(c.table.token_bytes[tok])
            q = after[pos - 1]
        self._tokens[q] = 0
        self._next.pop(q, None)
        return self._tokens[state]


class _NoEnding(Exception):
    pass


def _byte_of(dfa, cls: int) -> int:
    mask = dfa.class_masks[cls]
    for b in _PREFERRED:
        if (mask >> b) & 1:
            return b
    return dfa.class_rep[cls]


def _nicer(dfa, cls: int, than: int) -> bool:
    """Between two equally short classes, the one holding a preferred filler byte first."""
    def rank(c: int) -> int:
        mask = dfa.class_masks[c]
        for i, b in enumerate(_PREFERRED):
            if (mask >> b) & 1:
                return i
        return len(_PREFERRED) if dfa.class_size[c] == 1 else len(_PREFERRED) + 1
    return rank(cls) < rank(than)


def shortest_completion(constraint) -> ShortestCompletion | None:
    """The constraint's ShortestCompletion (built once), or None for automata without a lazy
    DFA over a ByteNFA (grammars run an Earley parser: no budget steering for them)."""
    dfa = getattr(constraint, "dfa", None)
    if dfa is None or not hasattr(dfa, "nfa") or not hasattr(dfa, "_sets"):
        return None
    got = constraint.__dict__.get("_shortest")
    if got is None:
        with _build_lock:
            got = constraint.__dict__.get("_shortest")
            if got is None:
                got = constraint.__dict__["_shortest"] = ShortestCompletion(constraint)
    return got


_build_lock = threading.Lock()
