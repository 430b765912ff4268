import os
import sys

# Tests import the slow reference implementations as plain modules.
sys.path.insert(0, os.path.dirname(__file__))
