"""A run that writes a few step lines, then waits on a socket for a peer that never connects (a
rendezvous, a data service): every thread blocked, the log silent. Extra arguments are ignored.
"""

import socket
import time

for step in range(1, 16):
    print(f"step {step} | loss 2.0", flush=True)
    time.sleep(0.05)
listener = socket.create_server(("127.0.0.1", 0))
print(f"waiting for a peer on port {listener.getsockname()[1]}", flush=True)
listener.accept()
