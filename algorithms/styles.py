"""Renderers applied to outputs when QGIS loads them after a run."""

from qgis.core import (QgsColorRampShader, QgsGradientColorRamp,
                       QgsPalettedRasterRenderer,
                       QgsProcessingLayerPostProcessorInterface,
                       QgsRasterBandStats, QgsRasterLayer, QgsRasterShader,
                       QgsSingleBandPseudoColorRenderer, QgsStyle)
from qgis.PyQt.QtGui import QColor

# Above this many labels a paletted renderer gets slow to build and to draw;
# a continuous ramp over the label range is used instead.
MAX_PALETTE_CLASSES = 4096

# QGIS only keeps a pointer to a post-processor: it must outlive the run.
_KEEP_ALIVE = {}


def keep(dest_id, styler):
    """Hold ``styler`` until the output ``dest_id`` has been loaded."""
    _KEEP_ALIVE[dest_id] = styler
    return styler


def label_colour(index):
    """A distinct, deterministic colour per label (golden-ratio hue steps)."""
    hue = (index * 0.618033988749895) % 1.0
    return QColor.fromHsvF(hue, 0.65, 0.95)


def _ramp(name):
    ramp = QgsStyle.defaultStyle().colorRamp(name)
    if ramp is None:
        ramp = QgsGradientColorRamp(QColor(68, 1, 84), QColor(253, 231, 37))
    return ramp


def _pseudocolor(layer, ramp_name):
    provider = layer.dataProvider()
    stats = provider.bandStatistics(
        1, QgsRasterBandStats.Min | QgsRasterBandStats.Max)
    minimum, maximum = stats.minimumValue, stats.maximumValue
    if not maximum > minimum:
        maximum = minimum + 1.0
    function = QgsColorRampShader(minimum, maximum, _ramp(ramp_name))
    function.classifyColorRamp()
    shader = QgsRasterShader()
    shader.setRasterShaderFunction(function)
    renderer = QgsSingleBandPseudoColorRenderer(provider, 1, shader)
    renderer.setClassificationMin(minimum)
    renderer.setClassificationMax(maximum)
    return renderer


class LabelStyle(QgsProcessingLayerPostProcessorInterface):
    """One colour per label (labels 1..count, or the raster's values)."""

    def __init__(self, count=None):
        super().__init__()
        self.count = count

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsRasterLayer):
            return
        provider = layer.dataProvider()
        if self.count is not None and self.count > MAX_PALETTE_CLASSES:
            layer.setRenderer(_pseudocolor(layer, "Spectral"))
        else:
            if self.count is not None:
                values = range(1, self.count + 1)
            else:
                classes = QgsPalettedRasterRenderer.classDataFromRaster(
                    provider, 1)
                values = [int(c.value) for c in classes][:MAX_PALETTE_CLASSES]
            classes = [QgsPalettedRasterRenderer.Class(value, label_colour(value),
                                                       str(value))
                       for value in values]
            layer.setRenderer(QgsPalettedRasterRenderer(provider, 1, classes))
        layer.triggerRepaint()


class RampStyle(QgsProcessingLayerPostProcessorInterface):
    """A continuous colour ramp between the band's minimum and maximum."""

    def __init__(self, ramp_name="Viridis"):
        super().__init__()
        self.ramp_name = ramp_name

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsRasterLayer):
            return
        layer.setRenderer(_pseudocolor(layer, self.ramp_name))
        layer.triggerRepaint()
