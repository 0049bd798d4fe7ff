-- wrk(1) script: POST each gzip body of a folder once, in order, then stop.
-- Environment: WRK_DIR (folder of 1.gz .. N.gz), WRK_BODIES (N), WRK_TOKEN (bearer token); WRK_DELAY_MS, when set,
-- the milliseconds each connection waits after an answer before its next request (a rate of at most connections ×
-- 1000 / (WRK_DELAY_MS + the answer's latency in ms) POST/s).
-- Run with one thread (-t1): the counters below are that thread's. Answers other than 200 are counted and the
-- first few printed, so that the caller can refuse a run with failures.
local dir, count, token = os.getenv("WRK_DIR"), tonumber(os.getenv("WRK_BODIES")), os.getenv("WRK_TOKEN")
local bodies, sent, answered, failed = {}, 0, 0, 0
local headers = {
  ["Content-Type"] = "application/json",
  ["Content-Encoding"] = "gzip",
  ["Authorization"] = "Bearer " .. token,
}

function init(args)
  for i = 1, count do
    local file = assert(io.open(dir .. "/" .. i .. ".gz", "rb"))
    bodies[i] = file:read("*a")
    file:close()
  end
end

local verified = false

local pause = tonumber(os.getenv("WRK_DELAY_MS") or "")
if pause then
  function delay()
    return pause
  end
end

function request()
  if not verified then
    -- wrk calls request() once on thread 0's state before the run, to count the requests per call, and
    -- discards what it returns: no body is spent on it.
    verified = true
    return wrk.format("GET", "/none")
  end
  sent = sent + 1
  if sent > count then
    -- wrk keeps every connection busy until the thread stops: the last connections ask for a path that is not
    -- there (404 without touching the database, whose CPU the caller measures).
    return wrk.format("GET", "/none")
  end
  return wrk.format("POST", "/api/v1/ingest", headers, bodies[sent])
end

function response(status, headers, body)
  if status == 404 then return end -- an answer to the filler requests above: ingest never answers 404
  answered = answered + 1
  if status ~= 200 then
    failed = failed + 1
    if failed <= 3 then io.stderr:write("HTTP " .. status .. ": " .. body:sub(1, 200) .. "\n") end
  end
  if answered >= count then
    io.stderr:write("answered " .. answered .. " failed " .. failed .. "\n")
    wrk.thread:stop()
  end
end
