"""How duetime speaks to Redis: key names, URLs and connections, the Lua scripts and the one
place that calls them, the records the scripts read and write, and the requests that the
sync and async stores both run.
"""
