"""Styles applied to the outputs when QGIS loads them after a run.

Each output gets what a cartographer would pick for it:

- labels (components, segments, allocation): a qualitative palette cycled
  by label, so consecutive labels never share a colour (up to
  MAX_PALETTE_CLASSES labels; past that, runs of consecutive labels do);
- directions (0-360 degrees): a cyclic ramp, so 359 and 1 look alike;
  0 (roots and sources, "no move") gets its own neutral colour;
- accumulated cost: a perceptual ramp (Magma), nodata transparent;
- least-cost paths and tree edges: graduated colours by cost / weight;
- component polygons: the label palette as fill (by label), thin outline.
"""

from qgis.core import (QgsClassificationJenks, QgsColorRampShader,
                       QgsFillSymbol, QgsGradientColorRamp,
                       QgsGradientStop, QgsGraduatedSymbolRenderer,
                       QgsLineSymbol, QgsPalettedRasterRenderer,
                       QgsProcessingLayerPostProcessorInterface, QgsProperty,
                       QgsRasterBandStats, QgsRasterLayer, QgsRasterShader,
                       QgsSingleBandPseudoColorRenderer,
                       QgsSimpleLineSymbolLayer, QgsSingleSymbolRenderer,
                       QgsStyle, QgsSymbolLayer,
                       QgsVectorLayer)
from qgis.PyQt.QtGui import QColor

# A qualitative palette (ColorBrewer "Paired" reordered so that consecutive
# entries differ in hue and lightness); label n gets entry n mod 12.
LABEL_PALETTE = ("#1f78b4", "#ff7f00", "#33a02c", "#e31a1c", "#6a3d9a",
                 "#b15928", "#a6cee3", "#fdbf6f", "#b2df8a", "#fb9a99",
                 "#cab2d6", "#ffff99")

# One paletted class per label up to this many labels (measured: 100 000
# classes build in 0.2 s and draw a 1024² block in 0.1 s; the style saved
# in a project grows by ~80 bytes a class).  Above it, runs of consecutive
# labels share a colour and the palette cycles by run (still no ramp).
MAX_PALETTE_CLASSES = 1 << 18

# A cyclic ramp (0 and 360 degrees meet) in the manner of matplotlib's
# "twilight": pale at east, blue at north, dark at west, red at south.
CYCLIC_STOPS = ((0.0, "#e2d9e2"), (0.125, "#9eb9d0"), (0.25, "#5e83c2"),
                (0.375, "#4c3f8f"), (0.5, "#2f1436"), (0.625, "#73243f"),
                (0.75, "#b45a4d"), (0.875, "#d8a785"), (1.0, "#e2d9e2"))
NO_MOVE_COLOUR = "#808080"  # direction 0: roots and sources

# QGIS only keeps a pointer to a post-processor: it must outlive the run.
_KEEP_ALIVE = {}


def keep(dest_id, styler):
    """Hold ``styler`` until the output ``dest_id`` has been loaded."""
    _KEEP_ALIVE[dest_id] = styler
    return styler


def label_colour(label):
    """The palette colour of ``label`` (cycled: label mod 12)."""
    return QColor(LABEL_PALETTE[int(label) % len(LABEL_PALETTE)])


def label_colour_expression(field):
    """A QGIS expression giving ``field``'s palette colour (for features)."""
    colours = ",".join(f"'{colour}'" for colour in LABEL_PALETTE)
    return (f'array_get(array({colours}), '
            f'"{field}" % {len(LABEL_PALETTE)})')


def cyclic_ramp():
    """The cyclic 0-360 degree ramp (ends equal)."""
    first, last = CYCLIC_STOPS[0][1], CYCLIC_STOPS[-1][1]
    stops = [QgsGradientStop(position, QColor(colour))
             for position, colour in CYCLIC_STOPS[1:-1]]
    return QgsGradientColorRamp(QColor(first), QColor(last), False, stops)


def _ramp(name):
    ramp = QgsStyle.defaultStyle().colorRamp(name)
    if ramp is None:  # a profile without the default ramps
        ramp = QgsGradientColorRamp(QColor(0, 0, 4), QColor(252, 253, 191))
    return ramp


def _band_range(layer):
    stats = layer.dataProvider().bandStatistics(
        1, QgsRasterBandStats.Min | QgsRasterBandStats.Max)
    minimum, maximum = stats.minimumValue, stats.maximumValue
    if not maximum > minimum:
        maximum = minimum + 1.0
    return minimum, maximum


def _pseudocolor(layer, function, minimum, maximum):
    shader = QgsRasterShader()
    shader.setRasterShaderFunction(function)
    renderer = QgsSingleBandPseudoColorRenderer(layer.dataProvider(), 1,
                                                shader)
    renderer.setClassificationMin(minimum)
    renderer.setClassificationMax(maximum)
    return renderer


def label_renderer(layer, labels):
    """A renderer with a palette colour per label of the sorted ``labels``
    (a paletted renderer; above MAX_PALETTE_CLASSES labels, a discrete
    shader whose runs of consecutive labels cycle through the palette)."""
    provider = layer.dataProvider()
    if len(labels) <= MAX_PALETTE_CLASSES:
        classes = [QgsPalettedRasterRenderer.Class(value, label_colour(value),
                                                   str(value))
                   for value in labels]
        return QgsPalettedRasterRenderer(provider, 1, classes)
    first, last = int(labels[0]), int(labels[-1])
    run = -(-(last - first + 1) // MAX_PALETTE_CLASSES)  # ceil
    items = [QgsColorRampShader.ColorRampItem(
        float(top), label_colour(index), f"{top - run + 1}-{top}")
        for index, top in enumerate(range(first + run - 1, last + run, run))]
    function = QgsColorRampShader(first, last)
    function.setColorRampType(QgsColorRampShader.Discrete)
    function.setColorRampItemList(items)
    return _pseudocolor(layer, function, first, last)


class LabelStyle(QgsProcessingLayerPostProcessorInterface):
    """A palette colour per label: labels 1..count, or the raster's values."""

    def __init__(self, count=None):
        super().__init__()
        self.count = count

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsRasterLayer):
            return
        if self.count is not None:
            labels = range(1, self.count + 1)
        else:
            labels = sorted(int(c.value) for c in
                            QgsPalettedRasterRenderer.classDataFromRaster(
                                layer.dataProvider(), 1))
        if len(labels) == 0:
            return  # nothing to colour: QGIS's default is fine
        layer.setRenderer(label_renderer(layer, labels))
        layer.triggerRepaint()


class RampStyle(QgsProcessingLayerPostProcessorInterface):
    """A perceptual ramp between the band's minimum and maximum (nodata,
    NaN and unreached cells stay transparent)."""

    def __init__(self, ramp_name="Magma"):
        super().__init__()
        self.ramp_name = ramp_name

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsRasterLayer):
            return
        minimum, maximum = _band_range(layer)
        function = QgsColorRampShader(minimum, maximum,
                                      _ramp(self.ramp_name))
        function.classifyColorRamp(7)
        function.setClip(True)
        layer.setRenderer(_pseudocolor(layer, function, minimum, maximum))
        layer.triggerRepaint()


class DirectionStyle(QgsProcessingLayerPostProcessorInterface):
    """Directions in degrees (east 360, north 90, as GRASS r.cost): a
    cyclic ramp over 0-360, and 0 (no move) in grey."""

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsRasterLayer):
            return
        ramp = cyclic_ramp()
        items = [QgsColorRampShader.ColorRampItem(
            0.0, QColor(NO_MOVE_COLOUR), "0 (no move: root or source)")]
        # stops every 45 degrees from 1 (the smallest real direction is a
        # knight's move, 26.6 degrees): interpolation follows the ramp
        names = {90: "90 (north)", 180: "180 (west)", 270: "270 (south)",
                 360: "360 (east)"}
        for degrees in (1, 45, 90, 135, 180, 225, 270, 315, 360):
            items.append(QgsColorRampShader.ColorRampItem(
                float(degrees), ramp.color(degrees / 360.0),
                names.get(degrees, str(degrees))))
        function = QgsColorRampShader(0.0, 360.0)
        function.setColorRampType(QgsColorRampShader.Interpolated)
        function.setSourceColorRamp(ramp.clone())
        function.setColorRampItemList(items)
        layer.setRenderer(_pseudocolor(layer, function, 0.0, 360.0))
        layer.triggerRepaint()


class GraduatedLineStyle(QgsProcessingLayerPostProcessorInterface):
    """Lines coloured (and widened) in natural-breaks classes of ``field``."""

    def __init__(self, field, ramp_name="Viridis", classes=5, casing=False):
        super().__init__()
        self.field = field
        self.ramp_name = ramp_name
        self.classes = classes
        self.casing = casing  # a white halo: lines drawn over a raster

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsVectorLayer) or layer.featureCount() == 0:
            return
        symbol = QgsLineSymbol.createSimple({"width": "0.5"})
        if self.casing:
            symbol.setWidth(0.8)
            halo = QgsSimpleLineSymbolLayer(QColor("white"), 1.4)
            halo.setLocked(True)  # keeps white when the ramp colours
            symbol.insertSymbolLayer(0, halo)
        renderer = QgsGraduatedSymbolRenderer(self.field)
        renderer.setSourceSymbol(symbol)
        renderer.setSourceColorRamp(_ramp(self.ramp_name))
        renderer.setClassificationMethod(QgsClassificationJenks())
        # no more classes than distinct values (Jenks leaves values out
        # otherwise); at most classes + 1 values are looked at
        distinct = layer.uniqueValues(layer.fields().indexOf(self.field),
                                      self.classes + 1)
        renderer.updateClasses(layer, max(1, min(self.classes, len(distinct))))
        renderer.updateColorRamp(_ramp(self.ramp_name))
        layer.setRenderer(renderer)
        layer.triggerRepaint()


class PolygonStyle(QgsProcessingLayerPostProcessorInterface):
    """Component polygons: filled with their label's palette colour (the
    colour of the label raster), outlined in dark grey."""

    def __init__(self, field="label"):
        super().__init__()
        self.field = field

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if not isinstance(layer, QgsVectorLayer):
            return
        symbol = QgsFillSymbol.createSimple({
            "color": LABEL_PALETTE[0], "outline_color": "#323232",
            "outline_width": "0.26"})
        symbol.symbolLayer(0).setDataDefinedProperty(
            QgsSymbolLayer.PropertyFillColor,
            QgsProperty.fromExpression(label_colour_expression(self.field)))
        layer.setRenderer(QgsSingleSymbolRenderer(symbol))
        layer.triggerRepaint()
