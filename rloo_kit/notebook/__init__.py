"""What a run looks like inside JupyterLab: the live view (`live`, drawn by `live_display` and `widgets`),
the curves it smooths (`curves`) and the plots of a finished run (`plots`).

Nothing here changes how a run trains: the trainer calls the live view as a callback, and the rest reads
logs. Nothing is imported from here at `import rloo_kit`.
"""
