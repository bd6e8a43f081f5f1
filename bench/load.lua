-- wrk script for bench/load.sh: every connection rotates through the four
-- request kinds (cached artifact GET, Range GET, manifest HEAD, blob GET).
-- Arguments (after --): artifact-path artifact-size manifest-path blob-path [blob-path...]
local artifact, size, manifest
local blobs = {}
local counter = 0

function init(args)
  artifact = args[1]
  size = tonumber(args[2])
  manifest = args[3]
  for i = 4, #args do blobs[#blobs + 1] = args[i] end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 100000)
end

local accept = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"

function request()
  counter = counter + 1
  local k = counter % 4
  if k == 0 then
    return wrk.format("GET", artifact)
  elseif k == 1 then
    local len = 65536
    local start = math.random(0, math.max(0, size - len - 1))
    return wrk.format("GET", artifact, { ["Range"] = "bytes=" .. start .. "-" .. (start + len - 1) })
  elseif k == 2 then
    return wrk.format("HEAD", manifest, { ["Accept"] = accept })
  else
    return wrk.format("GET", blobs[math.floor(counter / 4) % #blobs + 1])
  end
end

function done(summary, latency, requests)
  io.write(string.format("LOAD requests=%d duration_us=%d errors_connect=%d errors_read=%d errors_write=%d errors_status=%d errors_timeout=%d\n",
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.status, summary.errors.timeout))
  io.write(string.format("LATENCY p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
