"""The Lua that settles a run's answer text stream, run by the commit that publishes its answer.

A run's answer text stream (`Keys.answer_text`) is the run store's (runs.answer_text: its
entries, who writes and who reads them), but its invariant is kept here, in transport: the
script that sets the answer key (bus.commit, SET NX: once per run) settles the stream in the
same step, so a worker killed between the answer and its settlement cannot be. The commit is
below the store in the layers (the store's Redis readers use the bus's connection, keys and
errors), so the script's text lives beside the commit, and the store's writer builds its own
script on `TEXT_LUA`, the entry format both share (`n`, `kind`, `text`, `candidate`,
`provisional`, `why`).
"""

#: Lua shared by the scripts: the last entry's number and kind, and adding a numbered entry.
TEXT_LUA = """
local function text_last(key)
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  local n, kind, candidate = 0, false, false
  if #last > 0 then
    local f = last[1][2]
    for i = 1, #f, 2 do
      if f[i] == 'n' then n = tonumber(f[i + 1])
      elseif f[i] == 'kind' then kind = f[i + 1]
      elseif f[i] == 'candidate' then candidate = f[i + 1] end
    end
  end
  return n, kind, candidate
end
local function text_add(key, maxlen, n, ...)
  redis.call('XADD', key, 'MAXLEN', '~', maxlen, '*', 'n', n, ...)
  return n
end
"""

#: Settle a run's answer text stream on its published text (run by bus.commit's script, right
#: after it set the answer key): the deltas since the last reset, joined, become that text;
#: the stream is then kept `ttl` seconds (AEON_STREAM_KEEP_S).
#: What was streamed is known whole when the stream holds a reset, or its first entry is
#: number 1 (nothing trimmed), or it is empty; else a reset and the whole text.
SETTLE = (
    TEXT_LUA
    + """
local function text_settle(key, published, maxlen, ttl)
  local entries = redis.call('XRANGE', key, '-', '+')
  local parts, known, n = {}, #entries == 0, 0
  for i, e in ipairs(entries) do
    local f = {}
    for j = 1, #e[2], 2 do f[e[2][j]] = e[2][j + 1] end
    n = tonumber(f['n']) or n
    if i == 1 and n == 1 then known = true end
    if f['kind'] == 'reset' then parts = {}; known = true
    elseif f['kind'] == 'delta' then parts[#parts + 1] = f['text']
    elseif f['kind'] == 'settled' then return end
  end
  local streamed = table.concat(parts)
  if known and string.sub(published, 1, #streamed) == streamed then
    if #published > #streamed then
      n = text_add(key, maxlen, n + 1, 'kind', 'delta', 'text',
        string.sub(published, #streamed + 1), 'candidate', 'published', 'provisional', '0')
    end
  else
    n = text_add(key, maxlen, n + 1, 'kind', 'reset', 'why', 'published')
    if #published > 0 then
      n = text_add(key, maxlen, n + 1, 'kind', 'delta', 'text', published,
        'candidate', 'published', 'provisional', '0')
    end
  end
  text_add(key, maxlen, n + 1, 'kind', 'settled')
  redis.call('EXPIRE', key, ttl)
end
"""
)
