"""specwatch: is speculative decoding paying on this node right now?"""

__version__ = "0.1.0"
