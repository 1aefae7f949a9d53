"""Statistics: the timing samples as frames and their medians, the paired intervals and classes
of each comparison (stats, comparisons), the derived torch_best reference and the cuDNN algorithms
behind it, the backward passes' statistics, the atlas-guided dispatcher's choices and the map's
cells. CPU only; it reads tables, never the GPU."""
