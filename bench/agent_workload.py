"""Agent workloads for the load generator: the InferCept paper's six augmentations (Table 1)
and their mix, long agent sessions (`sessions`), or a JSON Lines trace (docs/TRACE.md).
Standard library only.

This is a line-for-line mirror of src/workload/workload.cpp and sessions.cpp (the generators
`infercept bench` uses), so that the load generator and the in-process bench replay the same
requests for the same spec: the same std::mt19937_64 sequence (implemented here), the same
splitmix64 seeding, the same uniform / exponential / Box-Muller / log-normal transforms
(src/workload/rng.h), the same draw order, clamps and proportional shrinking. tests/workload_py_test.py checks the moments against
Table 1 and, given the binary, the generated trace against `infercept bench --trace-out`
(integers equal, doubles equal up to the last bits a fused multiply-add may change).
"""
import json
import math

MASK64 = (1 << 64) - 1

# name, tool, interception seconds (mean, std), interceptions per request (mean, std),
# context tokens (mean, std), generated tokens per segment (min, max), returned per call
# (min, max). Moments: Table 1 of the paper; token ranges: default_profiles() in
# src/workload/workload.cpp (docs/TRACE.md says why).
DEFAULT_PROFILES = [
    ("math", "calculator", (9e-5, 6e-5), (3.75, 1.3), (1422, 738), (16, 48), (17, 34)),
    ("qa", "wikipedia", (0.69, 0.17), (2.52, 1.73), (1846, 428), (20, 60), (33, 81)),
    ("ve", "alfworld", (0.09, 0.014), (28.18, 15.2), (2185, 115), (3, 5), (2, 2)),
    ("chat", "human", (28.6, 15.6), (4.45, 1.96), (753, 703), (50, 150), (20, 60)),
    ("image", "stable-diffusion", (20.03, 7.8), (6.91, 3.93), (1247, 792), (30, 90), (10, 30)),
    ("tts", "bark", (17.24, 7.6), (6.91, 3.93), (1251, 792), (30, 90), (10, 30)),
]
AUGMENTATIONS = [p[0] for p in DEFAULT_PROFILES]
BUILTIN_WORKLOADS = ["mixed"] + AUGMENTATIONS + ["sessions"]

# Long agent sessions (src/workload/sessions.h; docs/TRACE.md gives the sources): per tool
# name, weight, seconds (mean, std), output tokens (mean, std).
DEFAULT_SESSION_TOOLS = [
    ("read_file", 0.30, (0.005, 0.005), (2000.0, 1500.0)),
    ("grep", 0.20, (0.05, 0.08), (800.0, 900.0)),
    ("edit_file", 0.20, (0.02, 0.02), (300.0, 250.0)),
    ("run_tests", 0.17, (8.0, 12.0), (2500.0, 3000.0)),
    ("web_fetch", 0.10, (2.0, 2.0), (4000.0, 4000.0)),
    ("human", 0.03, (120.0, 120.0), (60.0, 50.0)),
]
MAX_SESSION_TURNS = 10000
SESSION_CONTEXT_CAP = 1 << 30


class SessionTool:
    def __init__(self, name, weight, seconds, output_tokens):
        self.name, self.weight = name, weight
        self.seconds, self.output_tokens = tuple(seconds), tuple(output_tokens)


class SessionProfile:
    """SessionProfile of sessions.h, same defaults."""

    def __init__(self):
        self.system_tokens = 8192
        self.turns = (30.0, 20.0)
        self.task_tokens = (500.0, 400.0)
        self.generate_tokens = (150.0, 120.0)
        self.tools = [SessionTool(*t) for t in DEFAULT_SESSION_TOOLS]


class Profile:
    def __init__(self, name, tool, interception_s, interceptions, context_tokens, generate,
                 returned):
        self.name, self.tool = name, tool
        self.interception_s, self.interceptions = interception_s, interceptions
        self.context_tokens = context_tokens
        self.generate, self.returned = list(generate), list(returned)


def default_profiles():
    return [Profile(*p) for p in DEFAULT_PROFILES]


class Spec:
    """WorkloadSpec of workload.h, same defaults."""

    def __init__(self, name="mixed", rate=1.0, duration_s=60.0, seed=0, time_scale=1.0,
                 context_scale=1.0, max_context=0, min_prompt_tokens=8, profiles=None,
                 sessions=None):
        self.name, self.rate, self.duration_s, self.seed = name, rate, duration_s, seed
        self.time_scale, self.context_scale = time_scale, context_scale
        self.max_context, self.min_prompt_tokens = max_context, min_prompt_tokens
        self.profiles = profiles if profiles is not None else default_profiles()
        self.sessions = sessions if sessions is not None else SessionProfile()

    def profile(self, name):
        for p in self.profiles:
            if p.name == name:
                return p
        return None


class MT19937_64:
    """std::mt19937_64: the standard fixes its output sequence."""

    def __init__(self, seed):
        mt = [0] * 312
        mt[0] = seed & MASK64
        for i in range(1, 312):
            prev = mt[i - 1]
            mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64
        self.mt = mt
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def mix64(x):
    """splitmix64's finalizer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def llround(x):
    """C's llround: halfway cases away from zero (Python's round() goes to even)."""
    f = math.floor(x)
    r = f + 1 if x - f >= 0.5 else f
    if x < 0:
        return -llround(-x)
    return int(r)


class Rng:
    def __init__(self, seed):
        self.gen = MT19937_64(seed)

    def next_u64(self):
        return self.gen()

    def uniform(self):
        return float(self.gen() >> 11) * 2.0 ** -53

    def uniform_int(self, lo, hi):
        assert lo <= hi
        span = hi - lo + 1
        return lo + (((self.gen() >> 32) * span) >> 32)

    def exponential(self, rate):
        return -math.log1p(-self.uniform()) / rate

    def normal(self):
        u1 = 1.0 - self.uniform()
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def lognormal(self, m):
        mean, std = m
        assert mean > 0
        if std <= 0:
            return mean
        cv = std / mean
        sigma2 = math.log1p(cv * cv)
        mu = math.log(mean) - 0.5 * sigma2
        return math.exp(mu + math.sqrt(sigma2) * self.normal())


def min_context(spec, p, k):
    min_return = min(1, p.returned[0])
    return spec.min_prompt_tokens + (k + 1) + k * min_return


def validate(spec):
    """The checks of validate_workload_spec(); raises ValueError."""
    if spec.name not in BUILTIN_WORKLOADS:
        raise ValueError(f"unknown workload '{spec.name}' (expected {', '.join(BUILTIN_WORKLOADS)})")
    if not (math.isfinite(spec.rate) and spec.rate > 0):
        raise ValueError("rate must be > 0 requests/s")
    if not (math.isfinite(spec.duration_s) and spec.duration_s > 0):
        raise ValueError("duration must be > 0 s")
    if spec.rate * spec.duration_s > 1e7:
        raise ValueError("rate x duration asks for more than 10 million requests")
    if not (math.isfinite(spec.time_scale) and spec.time_scale > 0):
        raise ValueError("time scale must be > 0")
    if not (math.isfinite(spec.context_scale) and 0 < spec.context_scale <= 100):
        raise ValueError("context scale must be in (0, 100]")
    if spec.min_prompt_tokens < 1:
        raise ValueError("min prompt tokens must be >= 1")
    if spec.max_context < 0:
        raise ValueError("max context must be >= 0 (0: no clamp)")
    if spec.name == "sessions":
        validate_sessions(spec)
        return
    for name in AUGMENTATIONS:
        p = spec.profile(name)
        if p is None:
            raise ValueError(f"no profile for augmentation '{name}'")
        if not (1 <= p.generate[0] <= p.generate[1]):
            raise ValueError(f"{name}.generate: range {p.generate[0]}-{p.generate[1]} is invalid")
        if not (0 <= p.returned[0] <= p.returned[1]):
            raise ValueError(f"{name}.returned: range {p.returned[0]}-{p.returned[1]} is invalid")
        if spec.max_context > 0 and min_context(spec, p, 1) > spec.max_context:
            raise ValueError(f"max context {spec.max_context} is too small for a request with one "
                             f"interception ({min_context(spec, p, 1)} tokens)")


def apply_token_override(spec, expr):
    """"AUG.generate=MIN-MAX" or "AUG.returned=MIN-MAX" (AUG: a name or *), as the bench's --tokens."""
    try:
        lhs, value = expr.split("=", 1)
        aug, field = lhs.split(".", 1)
        lo, hi = (int(v) for v in value.split("-", 1))
    except ValueError:
        raise ValueError(f"token override '{expr}': malformed (expected AUG.generate=MIN-MAX or "
                         "AUG.returned=MIN-MAX)")
    if field not in ("generate", "returned"):
        raise ValueError(f"token override '{expr}': unknown field")
    if lo < (1 if field == "generate" else 0) or hi < lo:
        raise ValueError(f"token override '{expr}': bad range")
    matched = False
    for p in spec.profiles:
        if aug == "*" or p.name == aug:
            setattr(p, field, [lo, hi])
            matched = True
    if not matched:
        raise ValueError(f"token override '{expr}': unknown augmentation")


def generate_request(spec, p, rid, arrival_s, request_seed):
    """generate_request() of workload.cpp: one request as a trace dict (docs/TRACE.md)."""
    rng = Rng(request_seed)
    seed = rng.next_u64()
    k = max(1, llround(rng.lognormal(p.interceptions)))
    context = llround(rng.lognormal(p.context_tokens) * spec.context_scale)
    pause = [rng.lognormal(p.interception_s) * spec.time_scale for _ in range(k)]
    gen = [rng.uniform_int(p.generate[0], p.generate[1]) for _ in range(k + 1)]
    ret = [rng.uniform_int(p.returned[0], p.returned[1]) for _ in range(k)]

    if spec.max_context > 0:
        context = min(context, spec.max_context)
        while min_context(spec, p, k) > spec.max_context:
            k -= 1
        assert k >= 1
        pause, ret, gen = pause[:k], ret[:k], gen[:k + 1]
    context = max(context, min_context(spec, p, k))

    budget = context - spec.min_prompt_tokens
    total = sum(gen) + sum(ret)
    if total > budget:
        ret_floor = min(1, p.returned[0])
        f = budget / total
        gen = [max(1, int(g * f)) for g in gen]
        ret = [max(ret_floor, int(t * f)) for t in ret]
        total = sum(gen) + sum(ret)
        while total > budget:
            # The first largest, generated counts before returned ones (workload.cpp's scan).
            best, where = None, None
            for i, g in enumerate(gen):
                if g > 1 and (best is None or g > best):
                    best, where = g, ("g", i)
            for i, t in enumerate(ret):
                if t > ret_floor and (best is None or t > best):
                    best, where = t, ("r", i)
            assert where is not None
            (gen if where[0] == "g" else ret)[where[1]] -= 1
            total -= 1
    segments = []
    for i in range(k + 1):
        s = {"generate_tokens": gen[i]}
        if i < k:
            s.update(tool=p.tool, tool_seconds=pause[i], return_tokens=ret[i])
        segments.append(s)
    return {"id": rid, "arrival_s": arrival_s, "augmentation": p.name,
            "prompt_tokens": context - total, "seed": seed, "segments": segments}


# ---------------------------------------------------------------------------------------------
# Long agent sessions: sessions.cpp


def session_shared_prefix_tokens(spec):
    """The shared prefix (system prompt + tool definitions): system_tokens x context_scale."""
    return llround(float(spec.sessions.system_tokens) * spec.context_scale)


def _check_moments(m, what):
    mean, std = m
    if not (math.isfinite(mean) and mean > 0 and math.isfinite(std) and std >= 0):
        raise ValueError(f"sessions {what}: need mean > 0 and std >= 0")


def _session_limit(spec):
    return spec.max_context if spec.max_context > 0 else SESSION_CONTEXT_CAP


def validate_sessions(spec):
    """validate_session_spec(); raises ValueError."""
    p = spec.sessions
    if p.system_tokens < 0:
        raise ValueError("sessions system tokens must be >= 0")
    _check_moments(p.turns, "turns")
    _check_moments(p.task_tokens, "task tokens")
    _check_moments(p.generate_tokens, "generated tokens")
    if not p.tools:
        raise ValueError("sessions need at least one tool")
    names = set()
    total = 0.0
    for t in p.tools:
        if not t.name:
            raise ValueError("sessions: a tool name must not be empty")
        if t.name in names:
            raise ValueError(f"sessions: tool '{t.name}' twice")
        names.add(t.name)
        if not (math.isfinite(t.weight) and t.weight >= 0):
            raise ValueError(f"sessions tool {t.name}: weight must be >= 0")
        _check_moments(t.seconds, t.name + ".seconds")
        _check_moments(t.output_tokens, t.name + ".output")
        total += t.weight
    if not total > 0:
        raise ValueError("sessions: every tool has weight 0")
    least = session_shared_prefix_tokens(spec) + spec.min_prompt_tokens + 2
    if least > _session_limit(spec):
        raise ValueError(f"max context {_session_limit(spec)} is too small for the shared prefix "
                         f"({session_shared_prefix_tokens(spec)} tokens) and a session with one "
                         f"tool call ({least} tokens in all)")


def apply_session_override(spec, expr):
    """system=TOKENS, turns|task|generate=MEAN[,STD], TOOL.seconds|TOOL.output=MEAN[,STD],
    TOOL.weight=W (TOOL a name or *), as the bench's --session."""
    def bad(why):
        return ValueError(f"session override '{expr}': {why}")

    def number(text):
        try:
            x = float(text)
        except ValueError:
            raise bad("not a number")
        if not math.isfinite(x):
            raise bad("not a finite number")
        return x

    def moments(text):
        parts = text.split(",", 1)
        mean = number(parts[0])
        std = number(parts[1]) if len(parts) > 1 else 0.0
        if not (mean > 0 and std >= 0):
            raise bad("need MEAN > 0 and STD >= 0")
        return (mean, std)

    if "=" not in expr:
        raise bad("malformed")
    key, value = expr.split("=", 1)
    p = spec.sessions
    if key == "system":
        if not value.isdigit() or int(value) > 2**31 - 1:
            raise bad("TOKENS must be an integer >= 0")
        p.system_tokens = int(value)
        return
    if key in ("turns", "task", "generate"):
        setattr(p, {"turns": "turns", "task": "task_tokens", "generate": "generate_tokens"}[key],
                moments(value))
        return
    if "." not in key:
        raise bad("unknown key")
    tool, field = key.rsplit(".", 1)
    if field not in ("seconds", "output", "weight"):
        raise bad("unknown field")
    if field == "weight":
        w = number(value)
        if w < 0:
            raise bad("W must be >= 0")
    else:
        m = moments(value)
    matched = False
    for t in p.tools:
        if tool != "*" and t.name != tool:
            continue
        if field == "weight":
            t.weight = w
        elif field == "seconds":
            t.seconds = m
        else:
            t.output_tokens = m
        matched = True
    if not matched:
        raise bad("unknown tool")


def _draw_tokens(rng, m, scale, floor, cap):
    return max(floor, llround(min(rng.lognormal(m) * scale, float(cap))))


def _pick_tool(rng, tools, total):
    u = rng.uniform() * total
    acc = 0.0
    last = 0
    for i, t in enumerate(tools):
        if t.weight <= 0:
            continue
        acc += t.weight
        last = i
        if u < acc:
            return i
    return last


def generate_session(spec, rid, arrival_s, session_seed):
    """generate_session() of sessions.cpp: one session as a trace dict (docs/TRACE.md)."""
    p = spec.sessions
    cs = spec.context_scale
    limit = _session_limit(spec)
    total_weight = 0.0
    for t in p.tools:
        total_weight += t.weight
    rng = Rng(session_seed)
    seed = rng.next_u64()
    k = max(1, llround(min(rng.lognormal(p.turns), float(MAX_SESSION_TURNS))))
    task = _draw_tokens(rng, p.task_tokens, cs, spec.min_prompt_tokens, limit)
    tool, gen, out, pause = [], [], [], []
    for _ in range(k):
        i = _pick_tool(rng, p.tools, total_weight)
        tool.append(i)
        gen.append(_draw_tokens(rng, p.generate_tokens, cs, 1, limit))
        pause.append(rng.lognormal(p.tools[i].seconds) * spec.time_scale)
        out.append(_draw_tokens(rng, p.tools[i].output_tokens, cs, 0, limit))
    final = _draw_tokens(rng, p.generate_tokens, cs, 1, limit)

    system = session_shared_prefix_tokens(spec)
    context = system + task + final
    n = 0
    while n < k and context + gen[n] + out[n] <= limit:
        context += gen[n] + out[n]
        n += 1
    if n == 0:
        excess = context + gen[0] + out[0] - limit
        cut = max(0, min(excess, out[0]))
        out[0] -= cut
        excess -= cut
        cut = max(0, min(excess, task - spec.min_prompt_tokens))
        task -= cut
        excess -= cut
        cut = max(0, min(excess, gen[0] - 1))
        gen[0] -= cut
        excess -= cut
        cut = max(0, min(excess, final - 1))
        final -= cut
        excess -= cut
        assert excess <= 0
        n = 1
    segments = [{"generate_tokens": gen[i], "tool": p.tools[tool[i]].name,
                 "tool_seconds": pause[i], "return_tokens": out[i]} for i in range(n)]
    segments.append({"generate_tokens": final})
    return {"id": rid, "arrival_s": arrival_s, "augmentation": "sessions",
            "prompt_tokens": task, "seed": seed, "segments": segments}


def generate_workload(spec):
    """generate_workload(): Poisson arrivals in [0, duration), ids 0.. in arrival order."""
    validate(spec)
    arrivals = Rng(mix64(spec.seed))
    out = []
    t = 0.0
    rid = 0
    while True:
        t += arrivals.exponential(spec.rate)
        if t >= spec.duration_s:
            break
        request_seed = mix64(spec.seed ^ mix64(rid))
        if spec.name == "sessions":
            out.append(generate_session(spec, rid, t, request_seed))
            rid += 1
            continue
        aug = spec.name
        if aug == "mixed":
            pick = Rng(mix64(request_seed))
            aug = AUGMENTATIONS[pick.uniform_int(0, 5)]
        out.append(generate_request(spec, spec.profile(aug), rid, t, request_seed))
        rid += 1
    return out


SEGMENT_KEYS = {"generate_tokens", "tool", "tool_seconds", "return_tokens"}
REQUEST_KEYS = {"id", "arrival_s", "augmentation", "prompt_tokens", "seed", "segments"}


def read_trace(path):
    """A JSON Lines trace (docs/TRACE.md), checked like trace.cpp does; raises ValueError."""
    out, ids = [], set()
    last_arrival = 0.0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                r = json.loads(line)
            except ValueError:
                raise ValueError(f"{where}: not valid JSON")
            if not isinstance(r, dict):
                raise ValueError(f"{where}: not a JSON object")
            for key in r:
                if key not in REQUEST_KEYS:
                    raise ValueError(f"{where}: unknown field '{key}'")
            for key in REQUEST_KEYS:
                if key not in r:
                    raise ValueError(f"{where}: field '{key}': missing")
            if not isinstance(r["id"], int) or r["id"] < 0 or r["id"] in ids:
                raise ValueError(f"{where}: field 'id': must be a unique integer >= 0")
            ids.add(r["id"])
            if not isinstance(r["arrival_s"], (int, float)) or r["arrival_s"] < last_arrival:
                raise ValueError(f"{where}: field 'arrival_s': must be a number >= the previous one")
            last_arrival = r["arrival_s"]
            if not isinstance(r["prompt_tokens"], int) or r["prompt_tokens"] < 1:
                raise ValueError(f"{where}: field 'prompt_tokens': must be an integer >= 1")
            segs = r["segments"]
            if not isinstance(segs, list) or not segs:
                raise ValueError(f"{where}: field 'segments': must be a non-empty array")
            for i, s in enumerate(segs):
                fp = f"{where}: field 'segments[{i}]"
                if not isinstance(s, dict):
                    raise ValueError(f"{fp}': must be an object")
                for key in s:
                    if key not in SEGMENT_KEYS:
                        raise ValueError(f"{fp}.{key}': unknown field")
                g = s.get("generate_tokens")
                if not isinstance(g, int) or g < 1:
                    raise ValueError(f"{fp}.generate_tokens': must be an integer >= 1")
                last = i == len(segs) - 1
                tool = s.get("tool", "")
                if not last and not tool:
                    raise ValueError(f"{fp}.tool': required on every segment but the last")
                if tool:
                    if not isinstance(s.get("tool_seconds"), (int, float)) or s["tool_seconds"] < 0:
                        raise ValueError(f"{fp}.tool_seconds': must be a number >= 0")
                    if not isinstance(s.get("return_tokens"), int) or s["return_tokens"] < 0:
                        raise ValueError(f"{fp}.return_tokens': must be an integer >= 0")
            out.append(r)
    return out


def write_trace(path, requests):
    with open(path, "w", encoding="utf-8") as f:
        for r in requests:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def output_tokens(r):
    """Generated + returned tokens of a trace request (the denominator of normalized latency)."""
    return sum(s["generate_tokens"] + s.get("return_tokens", 0) for s in r["segments"])


def final_context(r):
    return r["prompt_tokens"] + output_tokens(r)
