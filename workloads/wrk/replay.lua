-- Trace replay for wrk (LuaJIT), the native engine. Reads the same trace files as Locust
-- (workloads/traces.py). wrk keeps one request in flight per connection (closed loop). Each
-- thread owns connections/threads clients (global index thread * K + j, N = threads * K) and
-- serves them in turn: client g replays its own sequence (offset g * L / N over the whole
-- trace, or subset g mod (L / S) with a `# subset-size: S` directive), in order, wrapping.
-- wrk's Lua API does not say which connection asks for a request, so a client's requests may
-- travel on different connections of its thread; the server sees the same mix and order.
--
-- Dynamic requests (paths under /dyn/, workloads/traces.py): writes (/dyn/write/) are sent as
-- POST with an empty body, everything else as GET. When the trace has dynamic requests, each
-- thread counts the successful answers that carry X-Tierbench-Query (dynamic) and those whose
-- value is `write`; wrk parses headers only when response() is defined, so a static trace
-- leaves it undefined and costs nothing more.
--
-- Environment: TRACE (path), CONNECTIONS, THREADS, WRK_OUT (JSON summary written by done()).
-- Per-second counts are requests issued per wall-clock second (after a connection's first,
-- each follows the completion of its previous one), counted with clock_gettime through ffi
-- once per 16 requests.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } tb_timespec;
int clock_gettime(int clk_id, tb_timespec *tp);
]]
local ts = ffi.new("tb_timespec")
local function now()
  ffi.C.clock_gettime(0, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local threads = {}
local next_tid = 0

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

local reqs, clients, nclients, turn = {}, {}, 0, 0
-- wrk 4.1 calls request() once on thread 0's state before the run, to verify the script (count
-- pipelined requests): that call must not advance any client nor count as sent.
local verifying = false
buckets = {}
started = 0
-- Requests are counted per second in batches of BATCH (one clock read per batch keeps the
-- replay as cheap as wrk's own); done() adds each thread's unbatched rest to its last second.
BATCH = 16
pending = 0
dynamic_ok, writes_ok = 0, 0

local function read_trace(path)
  local lines, subset = {}, nil
  local fh = assert(io.open(path, "r"))
  for line in fh:lines() do
    line = line:match("^%s*(.-)%s*$")
    if line:sub(1, 1) == "#" then
      local s = line:match("^#%s*subset%-size:%s*(%d+)")
      if s then subset = tonumber(s) end
    elseif line ~= "" then
      lines[#lines + 1] = line
    end
  end
  fh:close()
  return lines, subset
end

function init(args)
  local paths, subset = read_trace(os.getenv("TRACE"))
  local conns, nthreads = tonumber(os.getenv("CONNECTIONS")), tonumber(os.getenv("THREADS"))
  local per = math.floor(conns / nthreads)
  local total, n = per * nthreads, #paths
  local cache, dynamic = {}, false
  for i = 1, n do
    local p = paths[i]
    local r = cache[p]
    if not r then
      if p:sub(1, 11) == "/dyn/write/" then
        r = wrk.format("POST", p, nil, "")
      else
        r = wrk.format("GET", p)
      end
      cache[p] = r
    end
    if not dynamic and p:sub(1, 5) == "/dyn/" then dynamic = true end
    reqs[i] = r
  end
  if not dynamic then response = nil end
  for j = 0, per - 1 do
    local g = tid * per + j
    local lo, hi, pos
    if subset then
      local k = g % math.floor(n / subset)
      lo, hi = k * subset + 1, (k + 1) * subset
      pos = lo
    else
      lo, hi = 1, n
      pos = math.floor(g * n / total) + 1
    end
    clients[j + 1] = {lo = lo, hi = hi, pos = pos}
  end
  nclients = per
  verifying = tid == 0
  started = now()
end

function request()
  if verifying then
    verifying = false
    return reqs[clients[1].pos]
  end
  turn = turn % nclients + 1
  local c = clients[turn]
  local r = reqs[c.pos]
  c.pos = c.pos + 1
  if c.pos > c.hi then c.pos = c.lo end
  pending = pending + 1
  if pending == BATCH then
    ffi.C.clock_gettime(0, ts)
    local s = tonumber(ts.tv_sec)
    buckets[s] = (buckets[s] or 0) + BATCH
    pending = 0
  end
  return r
end

function response(status, headers, body)
  local query = headers["X-Tierbench-Query"]
  if query and status >= 200 and status < 400 then
    dynamic_ok = dynamic_ok + 1
    if query == "write" then writes_ok = writes_ok + 1 end
  end
end

function done(summary, latency, requests)
  -- wrk starts each thread as soon as its init() has read the trace, and its own clock once the
  -- last thread is started: the first thread may send requests before the measured run begins
  -- (seconds, with traces of millions of lines). Both ends are reported; tierbench counts the
  -- window from the last start.
  local start, last_start = math.huge, 0
  local per_second = {}
  local dyn, writes = 0, 0
  for _, t in ipairs(threads) do
    dyn = dyn + (t:get("dynamic_ok") or 0)
    writes = writes + (t:get("writes_ok") or 0)
    local st = t:get("started")
    if st and st > 0 and st < start then start = st end
    if st and st > last_start then last_start = st end
    local b = t:get("buckets")
    local last = nil
    for s, count in pairs(b or {}) do
      per_second[s] = (per_second[s] or 0) + count
      if not last or s > last then last = s end
    end
    local rest = t:get("pending") or 0
    if rest > 0 then
      last = last or math.floor(st or 0)
      per_second[last] = (per_second[last] or 0) + rest
    end
  end
  local secs = {}
  for s in pairs(per_second) do secs[#secs + 1] = s end
  table.sort(secs)
  local ps = {}
  for _, s in ipairs(secs) do
    ps[#ps + 1] = string.format('{"t": %d, "requests": %d}', s, per_second[s])
  end
  local pct = {}
  for _, p in ipairs({50, 75, 90, 99, 99.9, 99.99}) do
    pct[#pct + 1] = string.format('"%s": %.3f', tostring(p), latency:percentile(p) / 1000)
  end
  local e = summary.errors
  local out = io.open(os.getenv("WRK_OUT"), "w")
  out:write(string.format(
    '{"started": %.6f, "started_last": %.6f, "duration_s": %.6f, "requests": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_ms": {"min": %.3f, "max": %.3f, "mean": %.3f, "stdev": %.3f, ' ..
    '"percentiles": {%s}}, "per_second": [%s], "dynamic_ok": %d, "writes_ok": %d}\n',
    start, last_start, summary.duration / 1e6, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min / 1000, latency.max / 1000, latency.mean / 1000, latency.stdev / 1000,
    table.concat(pct, ", "), table.concat(ps, ", "), dyn, writes))
  out:close()
end
