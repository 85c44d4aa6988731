"""Agent workloads for the load generator: the InferCept paper's six augmentations (Table 1)
and their mix, or a JSON Lines trace (docs/TRACE.md). Standard library only.

This is a line-for-line mirror of src/workload/workload.cpp (the generator `infercept bench`
uses), so that the load generator and the in-process bench replay the same requests for the
same spec: the same std::mt19937_64 sequence (implemented here), the same splitmix64 seeding,
the same uniform / exponential / Box-Muller / log-normal transforms, the same draw order,
clamps and proportional shrinking. tests/workload_py_test.py checks the moments against
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
BUILTIN_WORKLOADS = ["mixed"] + AUGMENTATIONS


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
                 context_scale=1.0, max_context=0, min_prompt_tokens=8, profiles=None):
        self.name, self.rate, self.duration_s, self.seed = name, rate, duration_s, seed
        self.time_scale, self.context_scale = time_scale, context_scale
        self.max_context, self.min_prompt_tokens = max_context, min_prompt_tokens
        self.profiles = profiles if profiles is not None else default_profiles()

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
