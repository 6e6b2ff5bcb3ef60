-- include/utf8.lua: a strict UTF-8 check (as Python decodes it: no overlongs, no
-- surrogates, <= U+10FFFF). Pure.
-- Provides: utf8_ok
-- Key families: none

-- Only called on text holding a byte >= 0x80; ASCII definitions skip it.
local function utf8_ok(s)
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    if c < 0x80 then
      i = i + 1
    else
      local len, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then len = 2
      elseif c >= 0xE0 and c <= 0xEF then
        len = 3
        if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
      elseif c >= 0xF0 and c <= 0xF4 then
        len = 4
        if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
      end
      if len == 0 or i + len - 1 > n then return false end
      local c2 = string.byte(s, i + 1)
      if c2 < lo or c2 > hi then return false end
      for j = i + 2, i + len - 1 do
        local cc = string.byte(s, j)
        if cc < 0x80 or cc > 0xBF then return false end
      end
      i = i + len
    end
  end
  return true
end
