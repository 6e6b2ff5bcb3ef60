"""Stores: where jobs wait for their time. One interface (base.Store), two implementations."""
