@expose
def fine() -> int:
    return 1


raise RuntimeError("broken on purpose")  # BROKEN_LINE
