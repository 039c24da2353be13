-- Trace replay for wrk (LuaJIT), the native engine. Reads the same trace files as Locust
-- (workloads/traces.py), through their index: each client opens the trace at its own place and
-- reads its sequence 64 requests at a time into a ring of its own (formatted; a sequence of at
-- most 64 requests, such as a single-file trace, is read once and cycled), so memory and
-- start-up do not grow with the trace. wrk keeps one request in flight per connection (closed
-- loop). Each thread owns connections/threads clients
-- (global index thread * K + j, N = threads * K) and serves them in turn: client g replays its
-- own sequence (offset g * L / N over the whole trace, or subset g mod (L / S) with a
-- `# subset-size: S` directive), in order, wrapping.
-- wrk's Lua API does not say which connection asks for a request, so a client's requests may
-- travel on different connections of its thread; the server sees the same mix and order.
--
-- Dynamic requests (paths under /dyn/, workloads/traces.py): writes (/dyn/write/) are sent as
-- POST with an empty body, everything else as GET. When the trace has dynamic requests, each
-- thread counts the successful answers that carry X-Tierbench-Query (dynamic) and those whose
-- value is `write`; wrk parses headers only when response() is defined, so a static trace
-- (DYNAMIC unset) leaves it undefined and costs nothing more.
--
-- Environment: TRACE (path), CONNECTIONS, THREADS, WRK_OUT (JSON summary written by done()),
-- REQUESTS_PER_CLIENT (a request-count run, below), DYNAMIC=1 (the trace has dynamic requests),
-- THREAD_TARGETS (several proxies: each thread's host:port, below).
-- Per-second counts are requests issued per wall-clock second (after a connection's first,
-- each follows the completion of its previous one), each request counted in its own second
-- (clock_gettime through ffi: a vDSO call of tens of nanoseconds, against a request's tens of
-- microseconds at the least).
--
-- Request-count runs (REQUESTS_PER_CLIENT=N, 000 §5.2.1): every client sends the first N
-- requests of its sequence and stops. wrk calls request() once per connection to start and
-- then once after each answered (or failed) request, and sends whatever it returns: a
-- connection whose thread has nothing left to send gets an empty request, which sends nothing
-- (the connection idles). So after N x clients + connections calls every request the thread
-- sent has been answered: the thread notes the time (`finished`) and stops its event loop
-- (wrk.thread:stop()). The last thread to finish wakes wrk's main thread with SIGINT, which
-- wrk takes as the end of the run: the run ends when its last client has finished, and -d
-- is only a time limit.
--
-- Window-only latencies: wrk records every answer's latency (from when its request was written)
-- in one histogram shared by its threads (C's `statistics.latency`, src/stats.h), and its Lua
-- cannot tell which connection an answer came on, so the script cannot time requests itself.
-- Thread 0 instead reads that histogram every TICK_S (longer when a read would take more than
-- SCAN_SHARE of its time: the read walks min..max microseconds) and keeps what each read added,
-- per bucket of 3 significant digits (1 us below 1 ms, then 10 us, 100 us, ...: a value's
-- bucket is within 1 % of it); done() writes these `latency_ticks` ([time, [[bucket_us,
-- count], ...]]), and tierbench takes the window's latencies as the difference between the
-- reads nearest its ends. The histogram is found once in wrk's .bss (the exported __bss_start
-- and _end bound it: two adjacent pointers to histograms whose limit is TIMEOUT_S in
-- microseconds, latency first), and done() checks it is the very one wrk hands it; otherwise
-- no ticks are written. The reads happen while the run goes on, before wrk adds its
-- coordinated-omission samples, so they count what was measured.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } tb_timespec;
int clock_gettime(int clk_id, tb_timespec *tp);
int getpid(void);
int tgkill(int tgid, int tid, int sig);
int usleep(unsigned int usec);
typedef struct { uint64_t count; uint64_t limit; uint64_t min; uint64_t max; uint64_t data[]; } tb_stats;
extern char __bss_start[];
extern char _end[];
]]
local ts = ffi.new("tb_timespec")
local function now()
  ffi.C.clock_gettime(0, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local threads = {}
local next_tid = 0

-- Window-only latencies (above): thread 0's reads of wrk's latency histogram.
local TICK_S, SCAN_SHARE = 0.25, 0.02
local lat_stats, searched, next_tick = nil, false, 0
local bucket_seen = {}  -- bucket -> its count at the last read
ticks = {}              -- one "[time, [[bucket, added], ...]]" per read (read by done())
stats_addr = 0          -- where the histogram was found (0: not found)

-- wrk's latency histogram: the first of two adjacent .bss pointers to histograms of the limit
-- TIMEOUT_S sets (statistics = {latency, requests}), each checked readable in /proc/self/maps.
local function find_stats()
  local maps = {}
  for line in io.lines("/proc/self/maps") do
    local a, b, perm = line:match("^(%x+)-(%x+) (%S+)")
    if a and perm:sub(1, 1) == "r" then maps[#maps + 1] = {tonumber(a, 16), tonumber(b, 16)} end
  end
  local function stats_at(p)
    if p <= 0 then return nil end
    for _, m in ipairs(maps) do
      if p >= m[1] and p + 32 <= m[2] then return ffi.cast("tb_stats *", p) end
    end
    return nil
  end
  local limit = tonumber(os.getenv("TIMEOUT_S") or "10") * 1000000 + 1
  local lo = tonumber(ffi.cast("uintptr_t", ffi.C.__bss_start))
  local hi = tonumber(ffi.cast("uintptr_t", ffi.C._end))
  local words = ffi.cast("uint64_t *", lo - lo % 8)
  local n = math.floor((hi - (lo - lo % 8)) / 8)
  for i = 0, n - 2 do
    local a, b = stats_at(tonumber(words[i])), stats_at(tonumber(words[i + 1]))
    if a and b and tonumber(a.limit) == limit and tonumber(b.limit) == limit then
      return a, tonumber(words[i])
    end
  end
  return nil, 0
end

local function bucket_width(us)
  if us < 1000 then return 1 elseif us < 10000 then return 10 elseif us < 100000 then return 100
  elseif us < 1000000 then return 1000 elseif us < 10000000 then return 10000 end
  return 100000
end

-- One read: what each bucket gained since the last, with the time of the read.
local function read_latencies(t)
  local st = lat_stats
  local us, hi = tonumber(st.min), tonumber(st.max)
  local parts = {}
  while us <= hi do
    local w = bucket_width(us)
    local b = us - us % w
    local e = math.min(b + w - 1, hi)
    local sum = 0
    for v = us, e do sum = sum + tonumber(st.data[v]) end
    local seen = bucket_seen[b] or 0
    if sum ~= seen then
      parts[#parts + 1] = string.format("[%d, %d]", b, sum - seen)
      bucket_seen[b] = sum
    end
    us = b + w
  end
  ticks[#ticks + 1] = string.format("[%.6f, [%s]]", t, table.concat(parts, ", "))
end

local function tick(t)
  if not searched then
    searched = true
    lat_stats, stats_addr = find_stats()
  end
  if not lat_stats then
    next_tick = math.huge
    return
  end
  read_latencies(t)
  local took = now() - t
  next_tick = t + math.max(TICK_S, took / SCAN_SHARE)
end

-- Several proxies (THREAD_TARGETS="host:port,...", stack.proxies): each thread sends to the one
-- of its own number, all its connections and so all its clients bound to that proxy, as 004's
-- client threads were each pointed at one proxy. wrk sets a thread's server address, not a
-- connection's, hence whole threads (the Host header stays the URL's: the proxies' cache keys do
-- not depend on it, CacheKeyBaseURL in images/proxy/conf/tierbench.conf).
local thread_targets = nil
function setup(thread)
  thread:set("tid", next_tid)
  local list = os.getenv("THREAD_TARGETS") or ""
  if list ~= "" then
    if not thread_targets then
      thread_targets = {}
      for t in list:gmatch("[^,]+") do thread_targets[#thread_targets + 1] = t end
    end
    local host, port = thread_targets[next_tid + 1]:match("^(.*):(%d+)$")
    thread.addr = wrk.lookup(host, port)[1]
  end
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

local clients, nclients, turn = {}, 0, 0
-- Requests are formatted once per distinct path, in a cache emptied when it reaches CACHE_MAX
-- (traces whose every line differs would otherwise fill it with the whole run).
local cache, cached, CACHE_MAX = {}, 0, 65536
-- Each client reads its sequence AHEAD requests at a time into a ring of its own (memory: AHEAD
-- requests per client, whatever the trace's length); a sequence of at most AHEAD requests is
-- read once. (A line per request cost a Lua file read per request and, on a sequence of one
-- line such as a single-file trace, a seek: an lseek(2) per request.)
local AHEAD = 64
-- wrk 4.1 calls request() once on thread 0's state before the run, to verify the script (count
-- pipelined requests): that call must not advance any client nor count as sent.
local verifying = false
buckets = {}
started = 0
dynamic_ok, writes_ok = 0, 0
-- requests sent (globals, read by done()); a request-count run's quota per client and thread,
-- the calls of request() so far and when the thread's last answer came (0: not finished)
sent = 0
finished = 0
local per_client, quota, calls, nconns, done_path = nil, 0, 0, 0, nil
local SIGINT = 2

-- The trace's index (NAME.idx beside it, written by workloads/traces.py): requests, subset
-- size, lines per step and the byte offset of every step-th request line.
local function read_index(path)
  local fh = assert(io.open(path .. ".idx", "r"), "trace " .. path .. " has no index")
  local idx = {offsets = {}}
  fh:read("*l")  -- the comment line
  idx.lines = tonumber(fh:read("*l"):match("^lines (%d+)"))
  idx.subset = tonumber(fh:read("*l"):match("^subset (%d+)"))
  idx.step = tonumber(fh:read("*l"):match("^step (%d+)"))
  for line in fh:lines() do idx.offsets[#idx.offsets + 1] = tonumber(line) end
  fh:close()
  if idx.subset == 0 then idx.subset = nil end
  return idx
end

-- Position fh at request line n (0-based) and return its byte offset.
local function seek_line(idx, fh, n)
  fh:seek("set", idx.offsets[math.floor(n / idx.step) + 1])
  for _ = 1, n % idx.step do fh:read("*l") end
  return fh:seek()
end

local function format(path)
  local r = cache[path]
  if not r then
    if cached >= CACHE_MAX then cache, cached = {}, 0 end
    if path:sub(1, 11) == "/dyn/write/" then
      r = wrk.format("POST", path, nil, "")
    else
      r = wrk.format("GET", path)
    end
    cache[path] = r
    cached = cached + 1
  end
  return r
end

-- Client c's next AHEAD requests (formatted), read from its place in the trace (c.pos, the
-- next line to read), wrapping from hi back to lo.
local function refill(c)
  local ring, fh = c.ring, c.fh
  for k = 1, c.size do
    if c.pos >= c.hi then
      fh:seek("set", c.lo_at)
      c.pos = c.lo
    end
    ring[k] = format(fh:read("*l"))
    c.pos = c.pos + 1
  end
  c.at = 0
end

-- Client c's next request: the next of its ring, refilled when used up (a sequence that fits
-- in the ring was read once: the ring is the sequence, from the client's place, and cycles).
local function next_request(c)
  local at = c.at + 1
  if at > c.size then
    if not c.whole then refill(c) end
    at = 1
  end
  c.at = at
  return c.ring[at]
end

-- A request-count run: this thread's clients are done and answered. It records the time,
-- stops its event loop and, when it is the last thread to finish (counted in a file every
-- thread appends its number to), ends the run: SIGINT to wrk's main thread, which sleeps for
-- -d and ends the run on that signal. (50 ms first: wrk installs its SIGINT handler just after
-- starting the threads, microseconds before, and must be asleep when the signal comes.)
local function finish()
  finished = now()
  wrk.thread:stop()
  local fh = assert(io.open(done_path, "a"))
  fh:write(tid, "\n")
  fh:close()
  local n = 0
  for _ in io.lines(done_path) do n = n + 1 end
  if n >= tonumber(os.getenv("THREADS")) then
    ffi.C.usleep(50000)
    local pid = ffi.C.getpid()
    ffi.C.tgkill(pid, pid, SIGINT)
  end
end

function init(args)
  local path = os.getenv("TRACE")
  local idx = read_index(path)
  local conns, nthreads = tonumber(os.getenv("CONNECTIONS")), tonumber(os.getenv("THREADS"))
  local per = math.floor(conns / nthreads)
  local total, n = per * nthreads, idx.lines
  -- Each client opens the trace at its own place and reads AHEAD lines at a time: a thread's
  -- memory and start-up do not grow with the trace.
  if os.getenv("DYNAMIC") ~= "1" then response = nil end
  for j = 0, per - 1 do
    local g = tid * per + j
    local lo, hi, start
    if idx.subset then
      local k = g % math.floor(n / idx.subset)
      lo, hi = k * idx.subset, (k + 1) * idx.subset
      start = lo
    else
      lo, hi = 0, n
      start = math.floor(g * n / total)
    end
    local fh = assert(io.open(path, "rb"))
    local c = {fh = fh, lo = lo, hi = hi, lo_at = seek_line(idx, fh, lo), pos = start,
               ring = {}, size = math.min(AHEAD, hi - lo)}
    c.whole = c.size == hi - lo
    seek_line(idx, fh, start)
    refill(c)
    if c.whole then  -- read once: the file is no longer needed
      fh:close()
      c.fh = nil
    end
    clients[j + 1] = c
  end
  nclients = per
  verifying = tid == 0
  per_client = tonumber(os.getenv("REQUESTS_PER_CLIENT") or "")
  if per_client then
    for _, c in ipairs(clients) do c.left = per_client end
    quota, nconns = per_client * per, per
    done_path = os.getenv("WRK_OUT") .. ".finished"
    -- init() runs in wrk's main thread, thread 0's first: a fresh count of finished threads
    if tid == 0 then assert(io.open(done_path, "w")):close() end
  end
  started = now()
end

function request()
  if verifying then
    verifying = false
    return clients[1].ring[1]
  end
  local c
  if per_client then
    calls = calls + 1
    if finished > 0 then return "" end
    if calls >= quota + nconns then  -- every request this thread sent has been answered
      finish()
      return ""
    end
    if sent >= quota then return "" end  -- nothing left: this connection idles
    repeat
      turn = turn % nclients + 1
      c = clients[turn]
    until c.left > 0
    c.left = c.left - 1
  else
    turn = turn % nclients + 1
    c = clients[turn]
  end
  local r = next_request(c)
  sent = sent + 1
  ffi.C.clock_gettime(0, ts)
  local s = tonumber(ts.tv_sec)
  buckets[s] = (buckets[s] or 0) + 1
  if tid == 0 then
    local t = s + tonumber(ts.tv_nsec) * 1e-9
    if t >= next_tick then tick(t) end
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
  local total_sent, finished_last, threads_finished = 0, 0, 0
  for _, t in ipairs(threads) do
    dyn = dyn + (t:get("dynamic_ok") or 0)
    writes = writes + (t:get("writes_ok") or 0)
    local st = t:get("started")
    if st and st > 0 and st < start then start = st end
    if st and st > last_start then last_start = st end
    total_sent = total_sent + (t:get("sent") or 0)
    local fin = t:get("finished") or 0
    if fin > 0 then threads_finished = threads_finished + 1 end
    if fin > finished_last then finished_last = fin end
    for s, count in pairs(t:get("buckets") or {}) do
      per_second[s] = (per_second[s] or 0) + count
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
  -- wrk's latency histogram as recorded, one [microseconds, count] per value. wrk has already
  -- added its coordinated-omission correction to it (synthetic samples for every answer slower
  -- than twice the mean interval per connection), which tierbench takes out again. Read from
  -- wrk's stats struct (src/stats.h) through ffi: its Lua accessor latency(i) walks the whole
  -- histogram for each value.
  local hist = {}
  local ok = pcall(function()
    local st = ffi.cast("tb_stats **", latency)[0]
    for us = tonumber(st.min), tonumber(st.max) do
      local c = tonumber(st.data[us])
      if c > 0 then hist[#hist + 1] = string.format("[%d, %d]", us, c) end
    end
  end)
  if not ok then hist = {} end
  -- thread 0's reads of the latency histogram, if what it read is the histogram wrk hands done()
  local lticks = "null"
  local t0 = threads[1]
  if t0 and (t0:get("stats_addr") or 0) ~= 0 and tonumber(t0:get("stats_addr")) ==
      tonumber(ffi.cast("uintptr_t", ffi.cast("tb_stats **", latency)[0])) then
    lticks = "[" .. table.concat(t0:get("ticks") or {}, ", ") .. "]"
  end
  local e = summary.errors
  local out = io.open(os.getenv("WRK_OUT"), "w")
  -- a request-count run: the quota per client, what was sent, when the last thread finished
  local counted = os.getenv("REQUESTS_PER_CLIENT")
  if counted then
    out:write(string.format(
      '{"requests_per_client": %d, "sent": %d, "threads_finished": %d, "finished_last": %.6f, ',
      tonumber(counted), total_sent, threads_finished, finished_last))
  else
    out:write(string.format('{"sent": %d, ', total_sent))
  end
  out:write(string.format(
    '"started": %.6f, "started_last": %.6f, "duration_s": %.6f, "requests": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_ms": {"min": %.3f, "max": %.3f, "mean": %.3f, "stdev": %.3f, ' ..
    '"percentiles": {%s}}, "per_second": [%s], "dynamic_ok": %d, "writes_ok": %d, ' ..
    '"duration_us": %d, "histogram_us": [%s], "latency_ticks": %s}\n',
    start, last_start, summary.duration / 1e6, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min / 1000, latency.max / 1000, latency.mean / 1000, latency.stdev / 1000,
    table.concat(pct, ", "), table.concat(ps, ", "), dyn, writes, summary.duration,
    table.concat(hist, ", "), lticks))
  out:close()
end
