#!/usr/bin/env python3
"""mcast_ready.py ADDRESS PORT TIMEOUT_S: accept one TCP connection on ADDRESS:PORT (a
multicast receiver of tests/net/mcast.sh telling its round's sender it has joined), or fail
after TIMEOUT_S seconds."""
import socket, sys
s = socket.socket(socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(float(sys.argv[3]))
c, _ = s.accept()
c.close()
