"""matplotlib in a cell: pyplot.show() and the cell's end display the open figures as PNG and close them; display(fig) under IPython does too."""

import base64
import io
import sys
import traceback

from .display import send_display


def show_figures(*args, **kwargs):
    """pyplot.show() in a cell: the open figures are displayed here, in order
    with the cell's other output, and closed, as matplotlib-inline does."""
    flush_figures()


def _png_of_figure(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def on_pyplot_import(pyplot):
    pyplot.show = show_figures
    # display(fig) shows the figure as an image under IPython, as with %matplotlib inline.
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:  # base64 text, as a frontend receives image/png
        shell.display_formatter.formatters["image/png"].for_type_by_name(
            "matplotlib.figure", "Figure", lambda fig: base64.b64encode(_png_of_figure(fig)).decode("ascii"))


def flush_figures():
    """Sends every open matplotlib figure as image/png (and text/plain), then closes them."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
        for num in nums:
            fig = plt.figure(num)
            send_display({"image/png": base64.b64encode(_png_of_figure(fig)).decode("ascii"),
                          "text/plain": repr(fig)})
        if nums:
            plt.close("all")
    except Exception:
        traceback.print_exc()
