"""A replica's side of a namespace: claim.lua's reply read, acks riding with claims,
calendar plans written, wake-ups heard, presence kept.
"""
